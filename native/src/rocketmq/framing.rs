//! The TOTALSIZE chain of a CommitLog file, each step checked as the broker checks it.
//!
//! The rules of `formats/rocketmq_commitlog.py` (`walk`, `_chain`, `check_record`): v1/v2 magic,
//! TOTALSIZE at least the fixed part and inside the data, PHYSICALOFFSET equal to the
//! record's place, body/topic/properties lengths adding up to TOTALSIZE; a blank record must
//! end the file exactly; zeros are the unwritten tail.

use super::layout::{body_length_at, MAGIC_BLANK, MAGIC_V1, MAGIC_V2, MIN_RECORD};
use crate::read::{be_i16, be_i32, be_i64, prefetch};

/// Big-endian signed integer of `width` (1, 2, 4 or 8) bytes at `at`, bytes past the buffer
/// read as its last byte (as `formats/base.py::be_int` reads them).
#[inline(always)]
pub fn clamped(b: &[u8], at: i64, width: usize) -> i64 {
    if at >= 0 && (at as usize).saturating_add(width) <= b.len() {
        // The usual case, read at once: a record's fields lie inside the buffer. One read per
        // width: a copy of `width` bytes into an 8-byte array compiled to a call of memcpy whose
        // small stores the following 8-byte load had to wait for (perf: 71 % of check_record's
        // samples on that load, check_record 9 % of a RocketMQ pass).
        let at = at as usize;
        return match width {
            1 => b[at] as i8 as i64,
            2 => be_i16(b, at) as i64,
            4 => be_i32(b, at) as i64,
            8 => be_i64(b, at),
            _ => unreachable!("fields are 1, 2, 4 or 8 bytes wide"),
        };
    }
    clamped_past(b, at, width)
}

/// [`clamped`] of a field that is not all inside the buffer: only a broken record's.
#[cold]
#[inline(never)]
fn clamped_past(b: &[u8], at: i64, width: usize) -> i64 {
    let last = b.len().saturating_sub(1) as i64;
    let mut v: i64 = 0;
    for k in 0..width as i64 {
        let byte = if b.is_empty() { 0 } else { b[(at + k).clamp(0, last) as usize] };
        v = (v << 8) | byte as i64;
    }
    let shift = 64 - 8 * width as u32;
    (v << shift) >> shift
}

/// Why the record of TOTALSIZE `size` at `pos` cannot be one (`CommitLog.checkMessageAndReturnSize`).
pub fn check_record(buf: &[u8], pos: i64, size: i64, phys: i64) -> Option<String> {
    let at = clamped(buf, pos + 28, 8);
    if at != phys {
        return Some(format!("PHYSICALOFFSET {at} does not match the record's place {phys}"));
    }
    let sysflag = clamped(buf, pos + 36, 4) as i32;
    let v2 = clamped(buf, pos + 4, 4) as i32 == MAGIC_V2;
    let blen_at = pos + body_length_at(sysflag) as i64;
    let end = pos + size;
    let blen = clamped(buf, blen_at, 4);
    let tl_at = blen_at + 4 + blen;
    let width = if v2 { 2 } else { 1 };
    if blen < 0 || tl_at + width + 2 > end {
        return Some(format!("BODYLENGTH {blen} disagrees with TOTALSIZE {size}"));
    }
    let tlen = clamped(buf, tl_at, width as usize);
    let pl_at = tl_at + width + tlen;
    if tlen < 0 || pl_at + 2 > end {
        return Some(format!("TOPICLENGTH {tlen} disagrees with TOTALSIZE {size} (body {blen})"));
    }
    let plen = clamped(buf, pl_at, 2);
    if plen < 0 || pl_at + 2 + plen != end {
        return Some(format!(
            "lengths disagree with TOTALSIZE {size}: body {blen}, topic {tlen}, properties {plen} make {}",
            pl_at + 2 + plen - pos
        ));
    }
    None
}

/// Records up to this long are asked for whole by the walk ahead of their check (see
/// [`prefetch_next`]); of a longer one, its start and its last bytes only.
const PREFETCH_WHOLE: i64 = 1024;

/// Asks the CPU for the record that follows one of `size` bytes ending at `next`, guessed as
/// long as that one. Its check reads the header fields, then jumps over the body to TOPICLENGTH
/// before anything reads the body: a jump the hardware prefetcher does not follow (perf: that
/// load was the hottest of a RocketMQ pass, 6 %). Asked for while the record before it decodes,
/// the bytes are in cache when the check comes. Only a hint: `prefetch` ignores positions
/// outside `buf`, and a wrong guess costs a few wasted loads.
#[inline(always)]
fn prefetch_next(buf: &[u8], next: i64, size: i64) {
    let (head, tail) = if size <= PREFETCH_WHOLE { (size, None) } else { (64, Some(next + size - 256)) };
    // `+ 64`: the last line of the range, when it does not start on a line boundary.
    let mut line = next;
    while line < next + head + 64 {
        prefetch(buf, line);
        line += 64;
    }
    if let Some(from) = tail {
        let mut line = from;
        while line < next + size + 64 {
            prefetch(buf, line);
            line += 64;
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Stop {
    End,
    Incomplete,
    Blank,
    Zero,
    Broken,
}

impl Stop {
    pub fn name(self) -> &'static str {
        match self {
            Stop::End => "end",
            Stop::Incomplete => "incomplete",
            Stop::Blank => "blank",
            Stop::Zero => "zero",
            Stop::Broken => "broken",
        }
    }
}

#[derive(Debug)]
pub struct Framing {
    pub positions: Vec<i64>,
    pub lengths: Vec<i64>,
    pub stop: i64,
    pub kind: Stop,
    pub why: String,
    /// For `Incomplete`: the TOTALSIZE of the record at `stop`.
    pub need: i64,
}

/// Where the walk stops at `pos` (the step is not a whole, well-framed record), and why.
fn stop_at(buf: &[u8], pos: i64, end: i64, hard_end: i64, file_end: i64, phys: i64) -> Option<(Stop, String, i64)> {
    let size = be_i32(buf, pos as usize) as i64;
    let magic = be_i32(buf, pos as usize + 4);
    let record = magic == MAGIC_V1 || magic == MAGIC_V2;
    if record && size >= MIN_RECORD && pos + size <= end {
        return check_record(buf, pos, size, phys).map(|why| (Stop::Broken, why, 0));
    }
    Some(if record {
        if size < MIN_RECORD {
            (Stop::Broken, format!("TOTALSIZE {size} is smaller than the {MIN_RECORD}-byte fixed part"), 0)
        } else if pos + size > hard_end {
            (Stop::Broken, format!("TOTALSIZE {size} runs past the end of the data ({} bytes left)", hard_end - pos), 0)
        } else {
            (Stop::Incomplete, String::new(), size)
        }
    } else if magic == MAGIC_BLANK {
        if pos + size == file_end {
            (Stop::Blank, String::new(), 0)
        } else {
            let left = file_end - pos;
            (Stop::Broken, format!("BLANK magic with TOTALSIZE {size} does not end the file ({left} bytes left)"), 0)
        }
    } else if size == 0 && magic == 0 {
        (Stop::Zero, "zero bytes where a record should start".into(), 0)
    } else {
        (Stop::Broken, format!("bad magic code 0x{:08X} (TOTALSIZE {size})", magic as u32), 0)
    })
}

/// Walk `buf[start..end]` (`hard_end` >= `end`: where the data really ends; `phys_base`: the
/// physical offset of `buf[0]`; `file_end`: the end of the file, relative to `buf`).
pub fn walk(buf: &[u8], start: i64, end: i64, hard_end: i64, phys_base: i64, file_end: i64) -> Framing {
    walk_each(buf, start, end, hard_end, phys_base, file_end, |_, _, _| {})
}

/// [`walk`], calling `each(index, position, TOTALSIZE)` for every record as it is found (its
/// bytes are then in cache).
pub fn walk_each(buf: &[u8], start: i64, end: i64, hard_end: i64, phys_base: i64, file_end: i64,
                 mut each: impl FnMut(usize, i64, i64)) -> Framing {
    let mut fr = Framing { positions: Vec::new(), lengths: Vec::new(), stop: start, kind: Stop::End, why: String::new(), need: 0 };
    let mut pos = start;
    while pos + 8 <= end {
        if let Some((kind, why, need)) = stop_at(buf, pos, end, hard_end, file_end, phys_base + pos) {
            (fr.kind, fr.why, fr.need) = (kind, why, need);
            break;
        }
        let size = be_i32(buf, pos as usize) as i64;
        prefetch_next(buf, pos + size, size);
        each(fr.positions.len(), pos, size);
        fr.positions.push(pos);
        fr.lengths.push(size);
        pos += size;
    }
    if fr.kind == Stop::End && pos < end {
        // Fewer than 8 bytes left.
        if pos + 8 <= hard_end {
            fr.kind = Stop::Incomplete;
        } else {
            fr.kind = Stop::Broken;
            fr.why = format!("{} bytes at the end of the data, too few for a record header", hard_end - pos);
        }
    }
    fr.stop = pos;
    fr
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::rocketmq::layout::tests::record;

    #[test]
    fn walks_records_then_the_blank_that_ends_the_file() {
        let mut buf = record(0, b"body", "t", b"");
        let n = buf.len() as i64;
        buf.extend(record(n, b"second", "t", b"a\x01b\x02"));
        let blank_at = buf.len() as i64;
        buf.extend_from_slice(&16i32.to_be_bytes());
        buf.extend_from_slice(&MAGIC_BLANK.to_be_bytes());
        buf.extend_from_slice(&[0u8; 8]);
        let len = buf.len() as i64;
        let fr = walk(&buf, 0, len, len, 0, len);
        assert_eq!((fr.positions, fr.stop, fr.kind), (vec![0, n], blank_at, Stop::Blank));
    }

    #[test]
    fn each_break_has_its_kind() {
        let rec = record(0, b"x", "t", b"");
        let n = rec.len() as i64;
        let mut zeros = rec.clone();
        zeros.extend_from_slice(&[0u8; 16]);
        assert_eq!(walk(&zeros, 0, n + 16, n + 16, 0, n + 16).kind, Stop::Zero);
        let moved = walk(&rec, 0, n, n, 100, n);
        assert_eq!(moved.kind, Stop::Broken);
        assert_eq!(moved.why, "PHYSICALOFFSET 0 does not match the record's place 100");
        let cut = walk(&rec, 0, n - 1, n, 0, n);
        assert_eq!((cut.kind, cut.need), (Stop::Incomplete, n));
        assert_eq!(walk(&rec, 0, n - 1, n - 1, 0, n - 1).kind, Stop::Broken);
        let mut bad = rec.clone();
        bad[4] = 0x11;
        assert!(walk(&bad, 0, n, n, 0, n).why.starts_with("bad magic code 0x11A320A7"));
    }

    #[test]
    fn lengths_that_do_not_add_up_break_the_framing() {
        let mut rec = record(0, b"body", "t", b"");
        let n = rec.len();
        rec[n - 1] = 1; // properties length 1 where none follow
        let fr = walk(&rec, 0, n as i64, n as i64, 0, n as i64);
        assert_eq!(fr.why, format!("lengths disagree with TOTALSIZE {n}: body 4, topic 1, properties 1 make {}", n + 1));
    }

    #[test]
    fn clamped_reads_repeat_the_last_byte() {
        assert_eq!(clamped(&[0xff, 0xfe], 0, 2), -2);
        assert_eq!(clamped(&[0, 1], 1, 2), 0x0101);
    }

    #[test]
    fn clamped_reads_inside_the_buffer_are_signed_at_every_width() {
        let b = [0x80, 0xff, 0xff, 0xfe, 0, 0, 0, 1, 0x7f];
        assert_eq!(clamped(&b, 0, 1), -128);
        assert_eq!(clamped(&b, 8, 1), 127);
        assert_eq!(clamped(&b, 1, 2), -1);
        assert_eq!(clamped(&b, 0, 4), i32::from_be_bytes([0x80, 0xff, 0xff, 0xfe]) as i64);
        assert_eq!(clamped(&b, 0, 8), i64::from_be_bytes([0x80, 0xff, 0xff, 0xfe, 0, 0, 0, 1]));
        assert_eq!(clamped(&b, 1, 8), 0xffff_fe00_0000_017f_u64 as i64);
    }
}
