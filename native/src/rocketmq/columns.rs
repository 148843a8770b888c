//! Columns derived from a message's properties, sysflag and times, a row at a time.
//!
//! The rules of `formats/rocketmq_commitlog.py` (spec §5): delayTime from DELAY levels or
//! timer properties, startDeliverTime, expireTime (TTL), messageType, transactionState and
//! transactionId, KEYS split on spaces, the user properties apart from the reserved ones,
//! system copies by topic. Names the broker reserves, system topics and the delay table come
//! from Python (`formats/rocketmq_layout.py`), which stays their one source.

use std::collections::HashSet;

use crate::buffers::Binary;
use crate::hash::FnvBuild;
use crate::text::same;

/// Epoch milliseconds a Spark TIMESTAMP holds (years 1..9999).
pub const MS_MIN: i64 = -62_135_596_800_000;
pub const MS_MAX: i64 = 253_402_300_799_999;

/// What the rules need from Python.
pub struct Rules {
    pub delay_levels: Vec<i64>,
    pub reserved: HashSet<Vec<u8>, FnvBuild>,
    pub system_topics: HashSet<Vec<u8>, FnvBuild>,
    pub system_prefix: Vec<u8>,
}

/// A nullable string column.
#[derive(Default)]
pub struct OptStr {
    pub bin: Binary,
    pub valid: Vec<bool>,
}

impl OptStr {
    fn with_capacity(rows: usize, bytes: usize) -> Self {
        OptStr { bin: Binary::with_capacity(rows, bytes), valid: Vec::with_capacity(rows) }
    }

    #[inline(always)]
    fn push(&mut self, v: Option<&[u8]>) {
        match v {
            Some(v) => self.bin.push(v),
            None => self.bin.offsets.push(self.bin.data.len() as i32),
        }
        self.valid.push(v.is_some());
    }
}

/// A nullable int64 column.
#[derive(Default)]
pub struct OptI64 {
    pub values: Vec<i64>,
    pub valid: Vec<bool>,
}

impl OptI64 {
    fn with_capacity(rows: usize) -> Self {
        OptI64 { values: Vec::with_capacity(rows), valid: Vec::with_capacity(rows) }
    }

    #[inline(always)]
    fn push(&mut self, v: Option<i64>) {
        self.values.push(v.unwrap_or(0));
        self.valid.push(v.is_some());
    }
}

#[derive(Default)]
pub struct Derived {
    pub uniq: OptStr,
    pub tags: OptStr,
    pub trace: OptStr,
    pub correlation: OptStr,
    pub sharding: OptStr,
    pub transaction_id: OptStr,
    pub transaction_state: OptStr,
    pub message_type: OptStr,
    pub keys: Binary,
    pub keys_offsets: Vec<i32>,
    pub keys_valid: Vec<bool>,
    pub delay_ms: OptI64,
    pub deliver_us: OptI64,
    pub expire_us: OptI64,
    pub header_offsets: Vec<i32>,
    pub user_offsets: Vec<i32>,
    pub user_keys: Binary,
    pub user_values: Binary,
    pub system_copy: Vec<bool>,
    /// Per name code: its index in WANTED (or [`NOT_WANTED`]) and whether the broker reserves
    /// it (not a user property).
    roles: Vec<(u8, bool)>,
    headers: i32,
    topics: Vec<(Vec<u8>, bool)>,
}

/// The property names the rules read, in the order of [`Derived::push`]'s lookups.
const WANTED: [&[u8]; 13] = [b"UNIQ_KEY", b"DELAY", b"TRAN_MSG", b"TAGS", b"TRACE_CONTEXT", b"CORRELATION_ID",
                             b"__SHARDINGKEY", b"__transactionId__", b"TIMER_DELIVER_MS", b"TIMER_DELAY_SEC",
                             b"TIMER_DELAY_MS", b"TTL", b"KEYS"];
/// The role of a name the rules do not read.
const NOT_WANTED: u8 = u8::MAX;
const UNIQ: usize = 0;
const DELAY: usize = 1;
const TRAN: usize = 2;
const TAGS: usize = 3;
const TRACE: usize = 4;
const CORRELATION: usize = 5;
const SHARDING: usize = 6;
const TXN_ID: usize = 7;
const DELIVER_MS: usize = 8;
const DELAY_SEC: usize = 9;
const DELAY_MS: usize = 10;
const TTL: usize = 11;
const KEYS: usize = 12;

/// `^-?[0-9]{1,digits}$` as an int64, else None (`_int_values`).
fn int_value(v: Option<&[u8]>, digits: usize) -> Option<i64> {
    let v = v?;
    let d = v.strip_prefix(b"-").unwrap_or(v);
    if d.is_empty() || d.len() > digits || !d.iter().all(u8::is_ascii_digit) {
        return None;
    }
    let n = d.iter().fold(0i64, |n, &c| n * 10 + (c - b'0') as i64);
    Some(if d.len() < v.len() { -n } else { n })
}

fn micros(ms: Option<i64>) -> Option<i64> {
    ms.filter(|ms| (MS_MIN..=MS_MAX).contains(ms)).map(|ms| ms * 1000)
}

impl Derived {
    /// Room for about `rows` rows, so that no column grows (and copies itself) row by row.
    pub fn new(rows: usize) -> Self {
        let text = |bytes: usize| OptStr::with_capacity(rows, rows * bytes);
        let offsets = || {
            let mut v = Vec::with_capacity(rows + 1);
            v.push(0);
            v
        };
        Derived {
            uniq: text(32), tags: text(8), trace: text(0), correlation: text(0), sharding: text(0),
            transaction_id: text(0), transaction_state: text(0), message_type: text(6),
            keys: Binary::with_capacity(2 * rows, 16 * rows), keys_offsets: offsets(), keys_valid: Vec::with_capacity(rows),
            delay_ms: OptI64::with_capacity(rows), deliver_us: OptI64::with_capacity(rows),
            expire_us: OptI64::with_capacity(rows), header_offsets: offsets(), user_offsets: offsets(),
            user_keys: Binary::with_capacity(rows, 0), user_values: Binary::with_capacity(rows, 0),
            system_copy: Vec::with_capacity(rows), ..Default::default()
        }
    }

    /// Note a new property name (codes are given in order 0, 1, ...).
    pub fn name(&mut self, rules: &Rules, name: &[u8]) {
        let wanted = WANTED.iter().position(|w| *w == name).map_or(NOT_WANTED, |w| w as u8);
        self.roles.push((wanted, rules.reserved.contains(name)));
    }

    #[inline(always)]
    /// One row: its kept properties (name code, name, value), sysflag, BORNTIMESTAMP and topic.
    pub fn push(&mut self, rules: &Rules, props: &[(u32, &[u8], &[u8])], sysflag: i32, born_ms: i64, topic: &[u8]) {
        // One pass over the row's properties (a name appears once: the parser kept the last):
        // the values the rules read, and the user properties.
        let mut got: [Option<&[u8]>; WANTED.len()] = [None; WANTED.len()];
        for &(code, k, v) in props {
            let (wanted, reserved) = self.roles[code as usize];
            if let Some(slot) = got.get_mut(wanted as usize) {
                *slot = Some(v);
            }
            if !reserved {
                self.user_keys.push(k);
                self.user_values.push(v);
            }
        }
        let get = |w: usize| got[w];
        let uniq = get(UNIQ);
        let delay = get(DELAY);
        let tran = get(TRAN) == Some(b"true");
        let txn_bits = sysflag & 0xC;
        self.uniq.push(uniq);
        self.tags.push(get(TAGS));
        self.trace.push(get(TRACE));
        self.correlation.push(get(CORRELATION));
        self.sharding.push(get(SHARDING));
        let own_id = get(TXN_ID);
        self.transaction_id.push(own_id.or(if tran || txn_bits != 0 { uniq } else { None }));
        let states: [Option<&[u8]>; 4] = [None, Some(b"PREPARED"), Some(b"COMMIT"), Some(b"ROLLBACK")];
        self.transaction_state.push(states[(txn_bits >> 2) as usize]);
        let is_delay = delay.is_some() || [DELIVER_MS, DELAY_SEC, DELAY_MS].iter().any(|&k| get(k).is_some());
        let kind: &[u8] = if tran {
            b"TRANSACTION"
        } else if is_delay {
            b"DELAY"
        } else if get(SHARDING).is_some() {
            b"FIFO"
        } else {
            b"NORMAL"
        };
        self.message_type.push(Some(kind));
        let levels = &rules.delay_levels;
        let level = int_value(delay, 15).filter(|&l| l > 0).map(|l| levels[(l.min(levels.len() as i64) - 1) as usize]);
        let timer_sec = int_value(get(DELAY_SEC), 12).map(|s| s * 1000);
        self.delay_ms.push(level.or(int_value(get(DELAY_MS), 15)).or(timer_sec));
        let deliver = if delay.is_some() { None } else { int_value(get(DELIVER_MS), 15) };
        self.deliver_us.push(micros(deliver));
        let ttl = int_value(get(TTL), 15).filter(|&t| t > 0);
        self.expire_us.push(micros(ttl.map(|t| born_ms + t)));
        self.push_keys(get(KEYS));
        self.push_maps(props.len());
        self.push_system(rules, topic);
    }

    fn push_keys(&mut self, keys: Option<&[u8]>) {
        if let Some(keys) = keys {
            for piece in keys.split(|&b| b == b' ').filter(|p| !p.is_empty()) {
                self.keys.push(piece);
            }
        }
        self.keys_offsets.push(self.keys.offsets.len() as i32 - 1);
        self.keys_valid.push(keys.is_some());
    }

    /// Where the row's maps end: its `headers` (all `kept` properties) and its user properties.
    fn push_maps(&mut self, kept: usize) {
        self.headers += kept as i32;
        self.header_offsets.push(self.headers);
        self.user_offsets.push(self.user_keys.offsets.len() as i32 - 1);
    }

    /// Whether the topic is a system one, from the few topics of a chunk seen so far.
    fn push_system(&mut self, rules: &Rules, topic: &[u8]) {
        let known = self.topics.iter().find(|(t, _)| same(t, topic)).map(|(_, s)| *s);
        let system = known.unwrap_or_else(|| {
            let system = rules.system_topics.contains(topic) || topic.starts_with(&rules.system_prefix);
            if self.topics.len() < 64 {
                self.topics.push((topic.to_vec(), system));
            }
            system
        });
        self.system_copy.push(system);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rules() -> Rules {
        let set = |words: &str| words.split(' ').map(|w| w.as_bytes().to_vec()).collect();
        Rules { delay_levels: vec![1000, 5000, 10000], reserved: set("KEYS TAGS DELAY UNIQ_KEY TRAN_MSG"),
                system_topics: set("SCHEDULE_TOPIC_XXXX"), system_prefix: b"rmq_sys_".to_vec() }
    }

    fn row(d: &mut Derived, r: &Rules, props: &[(&str, &str)], sysflag: i32, topic: &str) {
        let mut coded = Vec::new();
        for (k, v) in props {
            let code = d.roles.len() as u32;
            d.name(r, k.as_bytes());
            coded.push((code, k.as_bytes(), v.as_bytes()));
        }
        d.push(r, &coded, sysflag, 1_000, topic.as_bytes());
    }

    #[test]
    fn delay_levels_clamp_and_timers_follow() {
        let (r, mut d) = (rules(), Derived::new(0));
        row(&mut d, &r, &[("DELAY", "9"), ("TIMER_DELIVER_MS", "5000")], 0, "t");
        row(&mut d, &r, &[("TIMER_DELAY_SEC", "3"), ("TTL", "10")], 0, "rmq_sys_wheel_timer");
        row(&mut d, &r, &[("DELAY", "x"), ("KEYS", " a  b ")], 8, "SCHEDULE_TOPIC_XXXX");
        assert_eq!(d.delay_ms.values[..2], [10000, 3000]);
        assert_eq!(d.delay_ms.valid, vec![true, true, false]);
        assert_eq!(d.deliver_us.valid, vec![false, false, false]); // DELAY present: no deliver time
        assert_eq!((d.expire_us.values[1], d.expire_us.valid[1]), (1_010_000, true)); // born 1000 ms + TTL 10 ms
        assert_eq!(d.message_type.bin.data, b"DELAYDELAYDELAY");
        assert_eq!((d.keys.data.as_slice(), d.keys_offsets.as_slice()), (&b"ab"[..], &[0, 0, 0, 2][..]));
        assert_eq!(d.system_copy, vec![false, true, true]);
        assert_eq!(d.transaction_state.valid, vec![false, false, true]);
    }

    #[test]
    fn transactions_and_user_properties() {
        let (r, mut d) = (rules(), Derived::new(0));
        row(&mut d, &r, &[("UNIQ_KEY", "u"), ("TRAN_MSG", "true"), ("app", "x")], 0, "t");
        assert_eq!(d.message_type.bin.data, b"TRANSACTION");
        assert_eq!(d.transaction_id.bin.data, b"u");
        assert_eq!((d.user_keys.data.as_slice(), d.header_offsets.as_slice(), d.user_offsets.as_slice()),
                   (&b"app"[..], &[0, 3][..], &[0, 1][..]));
        assert_eq!(int_value(Some(b"-12"), 15), Some(-12));
        assert_eq!(int_value(Some(b"1234567890123"), 12), None);
        assert_eq!(int_value(Some(b"1e3"), 15), None);
    }
}
