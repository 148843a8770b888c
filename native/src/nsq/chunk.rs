//! A whole chunk in one pass, record by record, while each record's bytes are in cache:
//! framing, fixed fields, JSON headers into columns, message id, trace id and body.
//!
//! Only for chunks where every record is plain: each passes every check, its version-2 tag
//! (if any) is UTF-8, and its JSON headers (if any) are simple (see [`super::json`]) whose `##trace_id`, if any, is a
//! decimal uint64 string. The first record that is not stops the columns (the framing goes
//! on), and Python decodes that chunk step by step (`formats/nsq_ext.py::decode_chunk`),
//! the reference for everything else. So this pass never quarantines and never decides a
//! rule the steps decide differently: the differential test holds both to the same output.

use super::fields::{attempts, ext_block, HEADER_SIZE, JSON_HEADER_EXT_VER, TAG_EXT_VER};
use super::framing::{Framing, Stop, MAX_POSSIBLE_MSG_SIZE};
use super::headers::{Columns, Value, TRACE_ID, WANTED};
use super::json::{header, Pair};
use crate::buffers::Binary;
use crate::digits::{is_u64, push_u64};
use crate::names::NameCodes;
use crate::read::{be_i32, be_i64, be_u16, be_u64};

/// Which header names are user properties (`nsq_headers.is_user_property`): not a column's
/// header, not under a reserved prefix.
pub struct UserProperties {
    pub columns: Vec<Vec<u8>>,
    pub prefixes: Vec<Vec<u8>>,
}

impl UserProperties {
    fn is(&self, name: &[u8]) -> bool {
        !(self.columns.iter().any(|c| c == name) || self.prefixes.iter().any(|p| name.starts_with(p)))
    }
}

/// The rows of a plain chunk.
pub struct Rows {
    pub store_us: Vec<i64>,
    pub attempts: Vec<i32>,
    pub message_id: Binary,
    pub body: Binary,
    pub headers: Columns,
}

/// The framing of a chunk, and its rows when every record is plain.
pub struct Chunk {
    pub framing: Framing,
    pub rows: Option<Rows>,
}

/// A header name's role among [`WANTED`] and whether it is a user property.
type Role = (Option<usize>, bool);

/// What one pass keeps from record to record.
struct Pass<'a> {
    rows: Rows,
    users: &'a UserProperties,
    /// The chunk's header names, and the role of each (by its code).
    names: NameCodes<'a>,
    roles: Vec<Role>,
    pairs: Vec<Pair<'a>>,
    row: Vec<(Option<usize>, bool, &'a [u8], Value<'a>)>,
}

impl<'a> Pass<'a> {
    fn role(&mut self, name: &'a [u8]) -> Role {
        let (code, new) = self.names.code(name);
        if new {
            let text = std::str::from_utf8(name).unwrap_or("");
            self.roles.push((WANTED.iter().position(|w| *w == text), self.users.is(name)));
        }
        self.roles[code as usize]
    }

    /// The record whose message (after the length prefix) is `buf[s..s + n]`, or None when it
    /// is not plain.
    fn push(&mut self, buf: &'a [u8], s: i64, n: i64) -> Option<()> {
        if n < HEADER_SIZE {
            return None;
        }
        let raw_attempts = be_u16(buf, (s + 8) as usize);
        let ext = ext_block(buf, s, n, raw_attempts).ok()?;
        let data = &buf[ext.data.0 as usize..ext.data.1 as usize];
        if ext.ver == TAG_EXT_VER as i16 && std::str::from_utf8(data).is_err() {
            return None; // quarantined by the steps
        }
        self.row.clear();
        if ext.ver == JSON_HEADER_EXT_VER as i16 {
            let mut pairs = std::mem::take(&mut self.pairs);
            header(data, &mut pairs)?;
            for &(name, is_int, text) in pairs.iter() {
                let (role, property) = self.role(name);
                if role == Some(TRACE_ID) && (is_int || !is_u64(text)) {
                    return None; // the steps reject it, or leave an integer to orjson
                }
                self.row.push((role, property, name, Value { is_int, text }));
            }
            self.pairs = pairs;
        }
        let r = &mut self.rows;
        r.headers.push(&self.row);
        let trace = be_u64(buf, (s + 18) as usize);
        if trace != 0 && r.headers.trace.last_is_null() {
            // traceId: the header's, else the record's trace half when set (formatted only then).
            let mut digits = [0u8; 20];
            r.headers.trace.or_last(crate::digits::format_u64(trace, &mut digits));
        }
        if ext.ver == TAG_EXT_VER as i16 && !data.is_empty() {
            r.headers.tags.or_last(data); // a version-2 tag (such a record has no JSON header)
        }
        r.store_us.push(be_i64(buf, s as usize).div_euclid(1000));
        r.attempts.push(attempts(raw_attempts));
        push_u64(&mut r.message_id.data, be_u64(buf, (s + 10) as usize));
        r.message_id.offsets.push(r.message_id.data.len() as i32);
        r.body.push(&buf[ext.body as usize..(s + n) as usize]);
        Some(())
    }
}

/// Frame `buf[start..end]` (the rules of [`super::framing::frame`]) and, while every record
/// is plain, make its rows.
pub fn decode<'a>(buf: &'a [u8], start: i64, end: i64, users: &'a UserProperties) -> Chunk {
    // One pass: the walk's next length prefix is read while the core still works on the
    // record before it (a walk first, to know the row count, made the chunks of the 1M set
    // take 0.336 s instead of 0.284 s: each step of a walk alone waits for the length it
    // jumps by). So the per-row vectors start at a guess of one row per 512 bytes and grow
    // from there; a chunk of larger records leaves the rest of the guess unused until its
    // arrays are freed (about 150 bytes per guessed row).
    let guess = ((end - start).max(0) / 512) as usize;
    let rows = Rows { store_us: Vec::with_capacity(guess), attempts: Vec::with_capacity(guess),
                      message_id: Binary::with_capacity(guess, 20 * guess),
                      body: Binary::with_capacity(guess, (end - start).max(0) as usize),
                      headers: Columns::with_capacity(guess) };
    let mut pass = Pass { rows, users, names: NameCodes::default(), roles: Vec::new(),
                          pairs: Vec::new(), row: Vec::new() };
    let mut plain = true;
    let mut positions = Vec::with_capacity(guess);
    let (mut pos, mut kind, mut bad) = (start, Stop::End, 0);
    while pos + 4 <= end {
        let n = be_i32(buf, pos as usize) as i64;
        let next = pos + 4 + n;
        if !(n > 0 && n <= MAX_POSSIBLE_MSG_SIZE && next <= end) {
            kind = if n <= 0 || n > MAX_POSSIBLE_MSG_SIZE { Stop::Broken } else { Stop::Incomplete };
            bad = n;
            break;
        }
        positions.push(pos);
        plain = plain && pass.push(buf, pos + 4, n).is_some();
        pos = next;
    }
    if kind == Stop::End && pos < end {
        kind = Stop::Incomplete; // a cut length prefix
    }
    let rows = (plain && !positions.is_empty()).then_some(pass.rows);
    Chunk { framing: Framing { positions, stop: pos, kind, bad }, rows }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::nsq::framing::frame;

    fn users() -> UserProperties {
        UserProperties { columns: vec![b"traceId".to_vec()], prefixes: vec![b"##".to_vec()] }
    }

    fn record(trace: u64, ext: &[u8], body: &[u8]) -> Vec<u8> {
        let mut m = 7_123i64.to_be_bytes().to_vec();
        m.extend_from_slice(&(if ext.is_empty() { 0u16 } else { 0xA001 }).to_be_bytes());
        m.extend_from_slice(&42u64.to_be_bytes());
        m.extend_from_slice(&trace.to_be_bytes());
        m.extend_from_slice(ext);
        m.extend_from_slice(body);
        let mut out = (m.len() as i32).to_be_bytes().to_vec();
        out.extend(m);
        out
    }

    fn json(h: &str) -> Vec<u8> {
        let mut e = vec![JSON_HEADER_EXT_VER];
        e.extend_from_slice(&(h.len() as u16).to_be_bytes());
        e.extend_from_slice(h.as_bytes());
        e
    }

    #[test]
    fn plain_records_become_rows_and_frame_as_the_walk_does() {
        let mut buf = record(9, &json(r#"{"app":"x","traceId":"t1"}"#), b"body1");
        buf.extend(record(9, &json(r#"{"app":"y"}"#), b"b2"));
        buf.extend(record(0, b"", b"plain"));
        buf.extend(record(0, &[TAG_EXT_VER, 0, 2, b't', b'2'], b"tagged"));
        buf.extend(record(0, &[TAG_EXT_VER, 0, 0], b"untagged"));
        buf.extend_from_slice(&[0, 0]); // a cut length prefix
        let end = buf.len() as i64;
        let c = decode(&buf, 0, end, &users());
        assert_eq!(c.framing, frame(&buf, 0, end));
        let r = c.rows.unwrap();
        assert_eq!(r.body.data, b"body1b2plaintaggeduntagged");
        assert_eq!(r.message_id.data, b"4242424242");
        assert_eq!((r.store_us, r.attempts), (vec![7; 5], vec![1, 1, 0, 1, 1]));
        assert_eq!((r.headers.trace.bin.data, r.headers.trace.valid),
                   (b"t19".to_vec(), vec![true, true, false, false, false]));
        assert_eq!((r.headers.tags.bin.data, r.headers.tags.valid), (b"t2".to_vec(), vec![false, false, false, true, false]));
        assert_eq!(r.headers.property_offsets, vec![0, 1, 2, 2, 2, 2]);
    }

    #[test]
    fn a_record_that_is_not_plain_leaves_the_chunk_to_the_steps() {
        for ext in [&[TAG_EXT_VER, 0, 1, 0xff][..], &json(r#"{"a": 1}"#), &json(r###"{"##trace_id":"x1"}"###),
                    &json(r###"{"##trace_id":12}"###), &[9]] {
            let mut buf = record(0, &json(r#"{"a":"1"}"#), b"ok");
            buf.extend(record(0, ext, b"body"));
            let c = decode(&buf, 0, buf.len() as i64, &users());
            assert!(c.rows.is_none());
            assert_eq!(c.framing, frame(&buf, 0, buf.len() as i64));
        }
    }
}
