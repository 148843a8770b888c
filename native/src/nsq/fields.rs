//! The fixed header and ext block of each framed record, with the checks that quarantine one.
//!
//! ```text
//! message := ts:int64be attempts:uint16be id:uint64be trace:uint64be [ext] body
//! ext     := ver:uint8 [len:uint16be data[len]]   # when (attempts & 0xF000) == 0xA000
//! ```
//! Reasons are worded exactly as `formats/nsq_ext.py::decode_chunk` words them.

use crate::read::{be_i64, be_u16, be_u64, prefetch, AHEAD};

pub const HEADER_SIZE: i64 = 26;
const MAX_ATTEMPTS: u16 = 4000;
const EXT_FLAG: u16 = 0xA000;
pub const NO_EXT_VER: u8 = 0;
pub const TAG_EXT_VER: u8 = 2;
pub const JSON_HEADER_EXT_VER: u8 = 4;

/// Columns of `n` records; values of a record that failed a check are unspecified.
#[derive(Default, Debug)]
pub struct Fields {
    pub ok: Vec<bool>,
    /// (record index, why) of every record that failed a check.
    pub reasons: Vec<(usize, String)>,
    pub ts_ns: Vec<i64>,
    pub attempts: Vec<i32>,
    pub msg_id: Vec<u64>,
    pub trace: Vec<u64>,
    /// Ext version, -1 where the record has no ext block.
    pub ver: Vec<i16>,
    /// Ext data range (empty unless the version has a length field).
    pub ext_start: Vec<i64>,
    pub ext_end: Vec<i64>,
    pub body_start: Vec<i64>,
}

impl Fields {
    fn with_capacity(n: usize) -> Self {
        Fields {
            ok: Vec::with_capacity(n),
            reasons: Vec::new(),
            ts_ns: Vec::with_capacity(n),
            attempts: Vec::with_capacity(n),
            msg_id: Vec::with_capacity(n),
            trace: Vec::with_capacity(n),
            ver: Vec::with_capacity(n),
            ext_start: Vec::with_capacity(n),
            ext_end: Vec::with_capacity(n),
            body_start: Vec::with_capacity(n),
        }
    }
}

/// Where the ext block of one record puts its data and body, or why the record is bad.
pub(super) struct Ext {
    pub ver: i16,
    pub data: (i64, i64),
    pub body: i64,
}

pub(super) fn ext_block(buf: &[u8], s: i64, n: i64, raw_attempts: u16) -> Result<Ext, String> {
    let high = raw_attempts & 0xF000;
    let is_ext = high == EXT_FLAG;
    if raw_attempts > MAX_ATTEMPTS && high != 0 && !is_ext {
        return Err(format!("attempts field 0x{raw_attempts:04x} has a reserved high nibble"));
    }
    if !is_ext {
        return Ok(Ext { ver: -1, data: (0, 0), body: s + HEADER_SIZE });
    }
    if n < HEADER_SIZE + 1 {
        return Err("ext flag set but the record ends before the ext version byte".into());
    }
    let ver = buf[(s + HEADER_SIZE) as usize];
    if ver != NO_EXT_VER && ver != TAG_EXT_VER && ver != JSON_HEADER_EXT_VER {
        return Err(format!("unknown ext version {ver}"));
    }
    if ver == NO_EXT_VER {
        return Ok(Ext { ver: 0, data: (0, 0), body: s + HEADER_SIZE + 1 });
    }
    if n < HEADER_SIZE + 3 {
        return Err("record ends inside the ext length field".into());
    }
    let len = be_u16(buf, (s + HEADER_SIZE + 1) as usize) as i64;
    if HEADER_SIZE + 3 + len > n {
        return Err(format!("ext length {len} runs past the record end ({n} bytes)"));
    }
    let a = s + HEADER_SIZE + 3;
    Ok(Ext { ver: ver as i16, data: (a, a + len), body: a + len })
}

/// The delivery count of the attempts field: its low twelve bits once the ext flag is set.
pub(super) fn attempts(raw: u16) -> i32 {
    (if raw > MAX_ATTEMPTS { raw & 0x0FFF } else { raw }) as i32
}

/// Read and check every record at `positions` (of the length prefix), `lengths` without it.
pub fn read(buf: &[u8], positions: &[i64], lengths: &[i64]) -> Fields {
    let mut f = Fields::with_capacity(positions.len());
    for (i, (&p, &n)) in positions.iter().zip(lengths).enumerate() {
        if let Some(&ahead) = positions.get(i + AHEAD) {
            prefetch(buf, ahead);
        }
        let s = p + 4;
        let checked = if n < HEADER_SIZE {
            Err(format!("record length {n} is below the {HEADER_SIZE}-byte minimum"))
        } else {
            ext_block(buf, s, n, be_u16(buf, (s + 8) as usize))
        };
        let ext = checked.unwrap_or_else(|why| {
            f.reasons.push((i, why));
            Ext { ver: -1, data: (0, 0), body: s }
        });
        let whole = n >= HEADER_SIZE;
        let raw_attempts = if whole { be_u16(buf, (s + 8) as usize) } else { 0 };
        f.ok.push(f.reasons.last().is_none_or(|r| r.0 != i));
        f.ts_ns.push(if whole { be_i64(buf, s as usize) } else { 0 });
        f.attempts.push(attempts(raw_attempts));
        f.msg_id.push(if whole { be_u64(buf, (s + 10) as usize) } else { 0 });
        f.trace.push(if whole { be_u64(buf, (s + 18) as usize) } else { 0 });
        f.ver.push(ext.ver);
        f.ext_start.push(ext.data.0);
        f.ext_end.push(ext.data.1);
        f.body_start.push(ext.body);
    }
    f
}

#[cfg(test)]
mod tests {
    use super::*;

    fn record(attempts: u16, tail: &[u8]) -> Vec<u8> {
        let mut m = 7i64.to_be_bytes().to_vec();
        m.extend_from_slice(&attempts.to_be_bytes());
        m.extend_from_slice(&42u64.to_be_bytes());
        m.extend_from_slice(&9u64.to_be_bytes());
        m.extend_from_slice(tail);
        let mut out = (m.len() as i32).to_be_bytes().to_vec();
        out.extend(m);
        out
    }

    fn one(rec: &[u8]) -> Fields {
        read(rec, &[0], &[rec.len() as i64 - 4])
    }

    #[test]
    fn the_47_byte_spec_record_has_its_ext_and_body_where_the_spec_says() {
        let rec = record(0xA000, b"\x04\x00\x04tes0\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00");
        assert_eq!(rec.len(), 47);
        let f = one(&rec);
        assert!(f.ok[0]);
        assert_eq!((f.ver[0], f.ext_start[0], f.ext_end[0], f.body_start[0]), (4, 33, 37, 37));
        assert_eq!((f.ts_ns[0], f.msg_id[0], f.trace[0], f.attempts[0]), (7, 42, 9, 0));
    }

    #[test]
    fn every_bad_kind_gets_its_reason() {
        let cases: [(Vec<u8>, &str); 5] = [
            (record(0x5001, b"body"), "attempts field 0x5001 has a reserved high nibble"),
            (record(0xA000, b""), "ext flag set but the record ends before the ext version byte"),
            (record(0xA000, b"\x07body"), "unknown ext version 7"),
            (record(0xA000, b"\x04\x00"), "record ends inside the ext length field"),
            (record(0xA000, b"\x04\x00\x09ab"), "ext length 9 runs past the record end (31 bytes)"),
        ];
        for (rec, why) in cases {
            let f = one(&rec);
            assert!(!f.ok[0]);
            assert_eq!(f.reasons, vec![(0, why.to_string())]);
        }
        let short = [0u8, 0, 0, 3, 1, 2, 3];
        assert_eq!(one(&short).reasons[0].1, "record length 3 is below the 26-byte minimum");
    }

    #[test]
    fn attempts_above_the_cap_keep_the_low_twelve_bits() {
        let f = one(&record(0xA003, b"\x00body"));
        assert!(f.ok[0]);
        assert_eq!((f.attempts[0], f.ver[0], f.body_start[0]), (3, 0, 31));
    }
}
