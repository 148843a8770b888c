//! The JSON headers producers usually write, read without a general JSON parser.
//!
//! go-nsq writes a header as a compact object of string and integer values. Such headers
//! are read here: `{"k":v,...}` with no whitespace, strings of printable ASCII without
//! escapes, integers of at most 18 digits without leading zeros, no key twice in a header.
//! Anything else in a chunk makes [`scan`] return None and Python parses the chunk with
//! orjson, so this path only accepts what `formats/nsq_json.py::scan` accepts, and gives the
//! same pairs.

use crate::buffers::Binary;
use crate::names::NameCodes;
use crate::read::{prefetch, AHEAD};
use crate::text::{after, same, simple_string};

/// Longest integer read here (an int64 holds any 18-digit number).
pub const MAX_DIGITS: usize = 18;

/// Every (key, value) pair of the headers, in header order (`formats/nsq_json.py::Pairs`).
#[derive(Debug, Default)]
pub struct Pairs {
    pub counts: Vec<i64>,
    /// Distinct keys in order of first appearance.
    pub names: Vec<String>,
    pub code: Vec<i64>,
    pub is_int: Vec<bool>,
    /// The value as text: a string's content, an integer's digits as written.
    pub texts: Binary,
}

/// A cursor over one header's bytes.
struct Cursor<'a> {
    b: &'a [u8],
    i: usize,
}

impl<'a> Cursor<'a> {
    #[inline(always)]
    fn eat(&mut self, c: u8) -> Option<()> {
        (self.b.get(self.i) == Some(&c)).then(|| self.i += 1)
    }

    #[inline(always)]
    fn string(&mut self) -> Option<&'a [u8]> {
        self.eat(b'"')?;
        let a = self.i;
        // Printable ASCII only: escapes, control bytes and non-ASCII are left to orjson.
        let len = simple_string(&self.b[a..])?;
        self.i = a + len + 1;
        Some(&self.b[a..a + len])
    }

    fn integer(&mut self) -> Option<&'a [u8]> {
        let a = self.i;
        let neg = self.eat(b'-').is_some();
        let d = self.i;
        while self.b.get(self.i).is_some_and(u8::is_ascii_digit) {
            self.i += 1;
        }
        let digits = self.i - d;
        if digits == 0 || digits > MAX_DIGITS || (self.b[d] == b'0' && (digits > 1 || neg)) {
            return None;
        }
        Some(&self.b[a..self.i])
    }
}

pub(super) type Pair<'a> = (&'a [u8], bool, &'a [u8]);

/// The pairs of one header into `pairs` (cleared first), or None unless it is simple.
pub(super) fn header<'a>(b: &'a [u8], pairs: &mut Vec<Pair<'a>>) -> Option<()> {
    let mut c = Cursor { b, i: 0 };
    pairs.clear();
    c.eat(b'{')?;
    if c.eat(b'}').is_none() {
        loop {
            let key = c.string()?;
            c.eat(b':')?;
            let (is_int, value) = match b.get(c.i)? {
                b'"' => (false, c.string()?),
                _ => (true, c.integer()?),
            };
            // A key twice: orjson keeps its first place and last value. Go writes keys sorted,
            // so a key above the last one is new without looking further.
            if pairs.last().is_some_and(|(last, _, _)| !after(key, last)) && pairs.iter().any(|(k, _, _)| same(k, key)) {
                return None;
            }
            pairs.push((key, is_int, value));
            if c.eat(b',').is_none() {
                c.eat(b'}')?;
                break;
            }
        }
    }
    (c.i == b.len()).then_some(())
}

/// The pairs of the headers `buf[starts[i]..ends[i]]`, or None unless every one is simple.
pub fn scan(buf: &[u8], starts: &[i64], ends: &[i64]) -> Option<Pairs> {
    if starts.is_empty() {
        return None;
    }
    let bytes: i64 = starts.iter().zip(ends).map(|(a, e)| e - a).sum();
    let mut out = Pairs { counts: Vec::with_capacity(starts.len()), ..Default::default() };
    out.texts = Binary::with_capacity(starts.len() * 8, bytes.max(0) as usize);
    let mut codes = NameCodes::default();
    let mut pairs: Vec<Pair> = Vec::new();
    for (i, (&a, &e)) in starts.iter().zip(ends).enumerate() {
        if let Some(&ahead) = starts.get(i + AHEAD) {
            prefetch(buf, ahead);
        }
        header(&buf[a as usize..e as usize], &mut pairs)?;
        out.counts.push(pairs.len() as i64);
        for &(key, is_int, value) in pairs.iter() {
            let (code, new) = codes.code(key);
            if new {
                out.names.push(String::from_utf8_lossy(key).into_owned()); // ASCII: lossless
            }
            let code = code as i64;
            out.code.push(code);
            out.is_int.push(is_int);
            out.texts.push(value);
        }
    }
    Some(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn one(h: &[u8]) -> Option<Pairs> {
        scan(h, &[0], &[h.len() as i64])
    }

    #[test]
    fn reads_strings_and_integers_in_order() {
        let p = one(br#"{"a":"x","b":-12,"c":0}"#).unwrap();
        assert_eq!(p.counts, vec![3]);
        assert_eq!(p.names, vec!["a", "b", "c"]);
        assert_eq!(p.is_int, vec![false, true, true]);
        assert_eq!(p.texts.data, b"x-120");
    }

    #[test]
    fn codes_are_shared_across_headers_in_first_seen_order() {
        let buf = br#"{"b":"1"}{}{"a":"2","b":"3"}"#;
        let p = scan(buf, &[0, 9, 11], &[9, 11, buf.len() as i64]).unwrap();
        assert_eq!((p.counts, p.names, p.code), (vec![1, 0, 2], vec!["b".to_string(), "a".into()], vec![0, 1, 0]));
    }

    #[test]
    fn anything_else_is_left_to_orjson() {
        for odd in [
            &br#"{"a": 1}"#[..], br#"{"a":1.5}"#, br#"{"a":true}"#, br#"{"a":"\n"}"#, br#"{"a":01}"#,
            br#"{"a":-0}"#, br#"{"a":1,"a":2}"#, br#"{"a":{"b":1}}"#, br#"{"a":1,}"#, br#"[1]"#, b"{",
            br#"{"a":1234567890123456789}"#, "{\"\u{e9}\":\"x\"}".as_bytes(), br#"{"a":"b"}x"#, br#"{"a"}"#,
        ] {
            assert!(one(odd).is_none(), "{}", String::from_utf8_lossy(odd));
        }
    }
}
