//! Columns from simple JSON headers (the pairs of [`super::json::scan`]), a row at a time.
//!
//! The rules of `formats/nsq_headers.py::header_columns` for headers of string and integer
//! values: timestamps and integers within their ranges (an integer, or a string that
//! Python's `int(s.strip())` reads), texts, `traceId` else `##trace_id`, `messageKey` else
//! `shardingKey`, `keys` split on spaces, the go-nsq compression code, and the `headers` /
//! `properties` maps. Which names are user properties is decided by Python.

use crate::buffers::Binary;

const MAX_MS: i128 = 253_402_300_799_999;
const I32: (i128, i128) = (i32::MIN as i128, i32::MAX as i128);
const I64: (i128, i128) = (i64::MIN as i128, i64::MAX as i128);

/// Header names the rules read; a name's place here is its role.
pub const WANTED: [&str; 17] = [
    "bornTimestamp", "startDeliverTime", "expireTime", "bornHost", "searchKey", "transactionId", "correlationId",
    "priority", "durability", "delayTime", "traceId", "##trace_id", "messageKey", "shardingKey",
    "##client_dispatch_tag", "keys", "nsq.client.compress",
];
const TIMES: [usize; 3] = [0, 1, 2];
const TEXTS: [usize; 4] = [3, 4, 5, 6];
const PRIORITY: usize = 7;
const DURABILITY: usize = 8;
const DELAY: usize = 9;
const TRACE: usize = 10;
pub const TRACE_ID: usize = 11;
const KEY: usize = 12;
const SHARDING: usize = 13;
const TAG: usize = 14;
const KEYS: usize = 15;
const COMPRESS: usize = 16;

/// go-nsq's compression codes (`compress.go`).
const CODECS: [(&[u8], &[u8]); 3] = [(b"1", b"gzip"), (b"2", b"snappy"), (b"3", b"lz4")];

/// One header value: an integer (its digits as written) or a string.
#[derive(Clone, Copy)]
pub struct Value<'a> {
    pub is_int: bool,
    pub text: &'a [u8],
}

/// A nullable column: values (strings, or int64 in `ints`) and validity.
#[derive(Default)]
pub struct Column {
    pub bin: Binary,
    pub ints: Vec<i64>,
    pub valid: Vec<bool>,
}

impl Column {
    #[inline(always)]
    fn text(&mut self, v: Option<&[u8]>) {
        if self.bin.offsets.is_empty() {
            self.bin.offsets.push(0);
        }
        self.bin.push(v.unwrap_or(b""));
        self.valid.push(v.is_some());
    }

    /// Whether the last value is null (what [`Self::or_last`] fills).
    #[inline(always)]
    pub fn last_is_null(&self) -> bool {
        self.valid.last() == Some(&false)
    }

    /// `text` in place of the last value when that one is null (a coalesce, row by row).
    pub fn or_last(&mut self, text: &[u8]) {
        if let Some(false) = self.valid.last() {
            self.bin.offsets.pop();
            self.bin.push(text);
            *self.valid.last_mut().unwrap() = true;
        }
    }

    /// `default` for every null number, the column then all valid (a fill_null).
    pub fn fill(&mut self, default: i64) {
        for (v, ok) in self.ints.iter_mut().zip(self.valid.iter_mut()) {
            if !*ok {
                (*v, *ok) = (default, true);
            }
        }
    }

    #[inline(always)]
    fn int(&mut self, v: Option<i64>) {
        self.ints.push(v.unwrap_or(0));
        self.valid.push(v.is_some());
    }
}

/// Every column `header_columns` makes, for `n` rows.
#[derive(Default)]
pub struct Columns {
    /// bornTimestamp, startDeliverTime, expireTime (microseconds); bornHost, searchKey,
    /// transactionId, correlationId; priority, durability, delayTime; traceId, messageKey,
    /// tags, compression.
    pub times: [Column; 3],
    pub texts: [Column; 4],
    pub ints: [Column; 3],
    pub trace: Column,
    pub message_key: Column,
    pub tags: Column,
    pub compression: Column,
    pub keys: Binary,
    pub keys_offsets: Vec<i32>,
    pub keys_valid: Vec<bool>,
    pub header_offsets: Vec<i32>,
    pub header_keys: Binary,
    pub header_values: Binary,
    pub property_offsets: Vec<i32>,
    pub property_keys: Binary,
    pub property_values: Binary,
}

/// What Python's `int(s.strip())` gives for an ASCII string, as i128 (None: not a number,
/// or too large for any column here).
fn python_int(s: &[u8]) -> Option<i128> {
    let s = s.trim_ascii();
    let (neg, digits) = match s.first()? {
        b'-' => (true, &s[1..]),
        b'+' => (false, &s[1..]),
        _ => (false, s),
    };
    // Digits, with single underscores between them.
    if digits.is_empty() || digits[0] == b'_' || digits[digits.len() - 1] == b'_' || digits.windows(2).any(|w| w == b"__") {
        return None;
    }
    let mut n: i128 = 0;
    for &c in digits.iter().filter(|&&c| c != b'_') {
        if !c.is_ascii_digit() {
            return None;
        }
        n = n.checked_mul(10)?.checked_add((c - b'0') as i128)?;
    }
    Some(if neg { -n } else { n })
}

/// A JSON integer as the simple headers hold it (`-?` and 1 to 18 digits, which any int64
/// holds), or None for any other text.
#[inline]
fn short_int(s: &[u8]) -> Option<i64> {
    let (neg, digits) = match s.first()? {
        b'-' => (true, &s[1..]),
        _ => (false, s),
    };
    if digits.is_empty() || digits.len() > 18 {
        return None;
    }
    let mut n = 0i64;
    for &c in digits {
        let d = c.wrapping_sub(b'0');
        if d > 9 {
            return None;
        }
        n = n * 10 + d as i64;
    }
    Some(if neg { -n } else { n })
}

/// An integer column's value: integers and integral strings within `[lo, hi]`.
fn integer(v: Option<Value>, (lo, hi): (i128, i128)) -> Option<i64> {
    let v = v?;
    // An integer's digits read as Python reads them; the usual short one without the i128 steps.
    let n = match v.is_int.then(|| short_int(v.text)).flatten() {
        Some(n) => n as i128,
        None => python_int(v.text)?,
    };
    (lo..=hi).contains(&n).then_some(n as i64)
}

fn texts<'a>(v: Option<Value<'a>>) -> Option<&'a [u8]> {
    v.map(|v| v.text)
}

impl Columns {
    pub fn new() -> Self {
        Self::with_capacity(0)
    }

    /// Room for `rows` rows in every per-row vector, so that a chunk's rows do not grow them
    /// step by step (each growth copies the vector).
    pub fn with_capacity(rows: usize) -> Self {
        let offsets = || {
            let mut v = Vec::with_capacity(rows + 1);
            v.push(0);
            v
        };
        let numbers = || Column { bin: Binary::default(), ints: Vec::with_capacity(rows), valid: Vec::with_capacity(rows) };
        let texts = || Column { bin: Binary::with_capacity(rows, 0), ints: Vec::new(), valid: Vec::with_capacity(rows) };
        Columns {
            times: [numbers(), numbers(), numbers()],
            texts: [texts(), texts(), texts(), texts()],
            ints: [numbers(), numbers(), numbers()],
            trace: texts(),
            message_key: texts(),
            tags: texts(),
            compression: texts(),
            keys: Binary::with_capacity(0, 0),
            keys_offsets: offsets(),
            keys_valid: Vec::with_capacity(rows),
            header_offsets: offsets(),
            header_keys: Binary::with_capacity(0, 0),
            header_values: Binary::with_capacity(0, 0),
            property_offsets: offsets(),
            property_keys: Binary::with_capacity(0, 0),
            property_values: Binary::with_capacity(0, 0),
        }
    }

    /// One row: its header's pairs (role of the name, user property or not, name, value);
    /// a row without a header has no pairs.
    pub fn push(&mut self, pairs: &[(Option<usize>, bool, &[u8], Value)]) {
        let mut got: [Option<Value>; WANTED.len()] = [None; WANTED.len()];
        for &(role, property, name, v) in pairs {
            if let Some(r) = role {
                got[r] = Some(v);
            }
            self.header_keys.push(name);
            self.header_values.push(v.text);
            if property {
                self.property_keys.push(name);
                self.property_values.push(v.text);
            }
        }
        self.header_offsets.push(self.header_keys.offsets.len() as i32 - 1);
        self.property_offsets.push(self.property_keys.offsets.len() as i32 - 1);
        for (col, role) in self.times.iter_mut().zip(TIMES) {
            col.int(integer(got[role], (0, MAX_MS)).map(|ms| ms * 1000));
        }
        for (col, role) in self.texts.iter_mut().zip(TEXTS) {
            col.text(texts(got[role]));
        }
        for (col, (role, range)) in self.ints.iter_mut().zip([(PRIORITY, I32), (DURABILITY, I32), (DELAY, I64)]) {
            col.int(integer(got[role], range));
        }
        self.trace.text(texts(got[TRACE]).or(texts(got[TRACE_ID])));
        self.message_key.text(texts(got[KEY]).or(texts(got[SHARDING])));
        self.tags.text(texts(got[TAG]));
        self.push_compression(got[COMPRESS]);
        self.push_keys(got[KEYS]);
    }

    fn push_compression(&mut self, v: Option<Value>) {
        let Some(v) = v else {
            return self.compression.text(None);
        };
        match CODECS.iter().find(|(code, _)| *code == v.text) {
            Some((_, name)) => self.compression.text(Some(name)),
            None => self.compression.text(Some(&[b"unknown:", v.text].concat())),
        }
    }

    /// A string split on spaces (empty pieces left out); an integer gives no list.
    fn push_keys(&mut self, v: Option<Value>) {
        let words = v.filter(|v| !v.is_int);
        if let Some(w) = words {
            for piece in w.text.split(|&b| b == b' ').filter(|p| !p.is_empty()) {
                self.keys.push(piece);
            }
        }
        self.keys_offsets.push(self.keys.offsets.len() as i32 - 1);
        self.keys_valid.push(words.is_some());
    }
}

/// The pairs of a chunk's headers as `formats/nsq_json.py::Pairs` holds them, header `i` on
/// row `rows[i]` of `n`.
pub struct Pairs<'a> {
    pub names: &'a [String],
    /// Per name code: a user property (not a column, not reserved).
    pub properties: &'a [bool],
    pub counts: &'a [i64],
    pub code: &'a [i64],
    pub is_int: &'a [u8],
    /// Arrow int32 offsets (native order) and data of the values' texts.
    pub offsets: &'a [u8],
    pub data: &'a [u8],
}

impl Pairs<'_> {
    fn text(&self, j: usize) -> &[u8] {
        let at = |k: usize| i32::from_ne_bytes(self.offsets[4 * k..4 * k + 4].try_into().unwrap()) as usize;
        &self.data[at(j)..at(j + 1)]
    }

    /// Every column, for `n` rows.
    pub fn columns(&self, rows: &[i64], n: usize) -> Columns {
        let roles: Vec<Option<usize>> = self.names.iter().map(|name| WANTED.iter().position(|w| w == name)).collect();
        let mut cols = Columns::new();
        let (mut pair, mut header, mut row_pairs) = (0usize, 0usize, Vec::new());
        for row in 0..n {
            row_pairs.clear();
            if header < rows.len() && rows[header] as usize == row {
                for _ in 0..self.counts[header] {
                    let c = self.code[pair] as usize;
                    let value = Value { is_int: self.is_int[pair] != 0, text: self.text(pair) };
                    row_pairs.push((roles[c], self.properties[c], self.names[c].as_bytes(), value));
                    pair += 1;
                }
                header += 1;
            }
            cols.push(&row_pairs);
        }
        cols
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn python_int_rules() {
        for (s, want) in [(&b" 42 "[..], Some(42)), (b"-7", Some(-7)), (b"+3", Some(3)), (b"1_000", Some(1000)),
                          (b"007", Some(7)), (b"1__0", None), (b"_1", None), (b"1_", None), (b"- 5", None),
                          (b"", None), (b"1.0", None), (b"0x10", None)] {
            assert_eq!(python_int(s), want, "{}", String::from_utf8_lossy(s));
        }
        assert_eq!(python_int(&[b'9'; 60]), None); // past i128: out of every range anyway
    }

    #[test]
    fn short_integers_read_as_python_reads_them() {
        for s in [&b"0"[..], b"-0", b"42", b"-7", b"123456789012345678", b"-123456789012345678", b"007"] {
            assert_eq!(short_int(s).map(|n| n as i128), python_int(s), "{}", String::from_utf8_lossy(s));
        }
        for s in [&b""[..], b"-", b"1234567890123456789", b"+3", b" 4", b"1_0", b"1.5", b"--1"] {
            assert_eq!(short_int(s), None, "{}", String::from_utf8_lossy(s));
        }
        // A text python_int takes but short_int does not still reads the same through integer().
        let wide = Value { is_int: true, text: b"1234567890123456789" };
        assert_eq!(integer(Some(wide), I64), Some(1_234_567_890_123_456_789));
    }

    fn value(is_int: bool, text: &str) -> Value<'_> {
        Value { is_int, text: text.as_bytes() }
    }

    #[test]
    fn a_header_becomes_its_columns() {
        let mut c = Columns::new();
        let role = |name: &str| WANTED.iter().position(|w| *w == name);
        let pairs = [(role("priority"), false, &b"priority"[..], value(true, "9")),
                     (role("keys"), false, b"keys", value(false, " a  b")),
                     (role("##trace_id"), false, b"##trace_id", value(false, "77")),
                     (role("nsq.client.compress"), false, b"nsq.client.compress", value(true, "2")),
                     (role("bornTimestamp"), false, b"bornTimestamp", value(false, "1_000")),
                     (None, true, b"app", value(false, "x"))];
        c.push(&pairs);
        c.push(&[(role("priority"), false, &b"priority"[..], value(true, "3000000000"))]);
        c.push(&[]);
        assert_eq!((c.ints[0].ints[0], c.ints[0].valid.clone()), (9, vec![true, false, false]));
        assert_eq!(c.keys.data, b"ab");
        assert_eq!(c.trace.bin.data, b"77");
        assert_eq!(c.compression.bin.data, b"snappy");
        assert_eq!(c.times[0].ints[0], 1_000_000);
        assert_eq!((c.header_offsets, c.property_offsets), (vec![0, 6, 7, 7], vec![0, 1, 1, 1]));
    }
}
