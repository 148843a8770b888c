//! The length-prefix walk of a segment: `size:int32be message[size]`, nothing between records.
//!
//! The same rules as `formats/nsq_ext.py` (`frame`, `_walk`, `advance`): a prefix <= 0 or
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

/// The walk without collecting records: (stop, kind, a boundary every `every` bytes).
pub fn walk(buf: &[u8], start: i64, end: i64, every: Option<i64>) -> (i64, Stop, Vec<i64>) {
    let (mut pos, mut mark, mut cuts) = (start, start, Vec::new());
    while pos + 4 <= end {
        let n = be_i32(buf, pos as usize) as i64;
        if n <= 0 || n > MAX_POSSIBLE_MSG_SIZE {
            return (pos, Stop::Broken, cuts);
        }
        if pos + 4 + n > end {
            return (pos, Stop::Incomplete, cuts);
        }
        pos += 4 + n;
        if let Some(every) = every {
            if pos - mark >= every && pos < end {
                cuts.push(pos);
                mark = pos;
            }
        }
    }
    (pos, if pos == end { Stop::End } else { Stop::Incomplete }, cuts)
}

/// How far to read from `start` within a byte and record budget: (boundary, records).
///
/// At least one record always goes; corrupt framing sends the rest of the range at once
/// (`end`, records + 1), as the decoder quarantines it in one go.
pub fn advance(buf: &[u8], start: i64, end: i64, limit: i64, max_bytes: Option<i64>, max_records: Option<i64>) -> (i64, i64) {
    let (mut pos, mut count) = (start, 0i64);
    while pos + 4 <= limit {
        let n = be_i32(buf, pos as usize) as i64;
        let next = pos + 4 + n;
        if n <= 0 || n > MAX_POSSIBLE_MSG_SIZE || next > limit {
            return (end, count + 1);
        }
        let over_bytes = max_bytes.is_some_and(|m| next - start > m);
        let over_records = max_records.is_some_and(|m| count >= m);
        if count > 0 && (over_bytes || over_records) {
            return (pos, count);
        }
        pos = next;
        count += 1;
    }
    if pos < limit {
        return (end, count + 1); // a cut length prefix before the committed end
    }
    (pos, count)
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

    #[test]
    fn walk_cuts_every_so_many_bytes_on_boundaries() {
        let buf: Vec<u8> = (0..10).flat_map(|_| rec(&[7u8; 6])).collect();
        let (stop, kind, cuts) = walk(&buf, 0, buf.len() as i64, Some(25));
        assert_eq!((stop, kind), (100, Stop::End));
        assert_eq!(cuts, vec![30, 60, 90]);
    }

    #[test]
    fn advance_takes_one_record_over_budget_and_counts_records() {
        let buf: Vec<u8> = (0..5).flat_map(|_| rec(&[1u8; 6])).collect();
        let end = buf.len() as i64;
        assert_eq!(advance(&buf, 0, end, end, Some(1), None), (10, 1));
        assert_eq!(advance(&buf, 0, end, end, None, Some(3)), (30, 3));
        assert_eq!(advance(&buf, 0, end, end, None, None), (50, 5));
        assert_eq!(advance(&buf, 0, end, end - 3, None, None), (end, 5));
    }
}
