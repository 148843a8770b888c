//! The length-prefix walk of a segment: `size:int32be message[size]`, nothing between records.
//!
//! The same rules as `formats/nsq_ext.py` (`frame`): a prefix <= 0 or
//! above the reader's 1<<28 bound breaks the framing; a record past the range end is
//! incomplete.

use crate::read::be_i32;

/// `MAX_POSSIBLE_MSG_SIZE`: the largest length prefix nsqd's reader accepts.
pub const MAX_POSSIBLE_MSG_SIZE: i64 = 1 << 28;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Stop {
    /// The range is fully framed.
    End,
    /// A record (or a length prefix) runs past the range end.
    Incomplete,
    /// A length prefix no writer produces: framing is lost here.
    Broken,
}

impl Stop {
    pub fn name(self) -> &'static str {
        match self {
            Stop::End => "end",
            Stop::Incomplete => "incomplete",
            Stop::Broken => "broken",
        }
    }
}

/// Records of `buf[start..end]`: where each starts (its prefix), where the walk stopped and why.
#[derive(Debug, PartialEq)]
pub struct Framing {
    pub positions: Vec<i64>,
    pub stop: i64,
    pub kind: Stop,
    /// The offending (or too long) length prefix, 0 when none.
    pub bad: i64,
}

/// Walk the prefixes of `buf[start..end]`, collecting every complete record.
pub fn frame(buf: &[u8], start: i64, end: i64) -> Framing {
    let mut positions = Vec::new();
    let (mut pos, mut kind, mut bad) = (start, Stop::End, 0);
    while pos + 4 <= end {
        let n = be_i32(buf, pos as usize) as i64;
        let next = pos + 4 + n;
        if n > 0 && n <= MAX_POSSIBLE_MSG_SIZE && next <= end {
            positions.push(pos);
            pos = next;
            continue;
        }
        kind = if n <= 0 || n > MAX_POSSIBLE_MSG_SIZE { Stop::Broken } else { Stop::Incomplete };
        bad = n;
        break;
    }
    if kind == Stop::End && pos < end {
        kind = Stop::Incomplete; // a cut length prefix
    }
    Framing { positions, stop: pos, kind, bad }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rec(body: &[u8]) -> Vec<u8> {
        let mut v = (body.len() as i32).to_be_bytes().to_vec();
        v.extend_from_slice(body);
        v
    }

    #[test]
    fn frames_complete_records_and_reports_a_cut_one() {
        let fr = frame(b"\x00\x00\x00\x01X\x00\x00", 0, 7);
        assert_eq!((fr.positions, fr.stop, fr.kind), (vec![0], 5, Stop::Incomplete));
    }

    #[test]
    fn a_zero_or_huge_prefix_breaks_the_framing() {
        let mut buf = rec(b"abc");
        buf.extend_from_slice(&[0, 0, 0, 0, 1, 2]);
        let fr = frame(&buf, 0, buf.len() as i64);
        assert_eq!((fr.positions.len(), fr.stop, fr.kind, fr.bad), (1, 7, Stop::Broken, 0));
        let big = rec(b"x").iter().chain(&[0x20, 0, 0, 0]).copied().collect::<Vec<u8>>();
        assert_eq!(frame(&big, 0, big.len() as i64).kind, Stop::Broken);
    }
}
