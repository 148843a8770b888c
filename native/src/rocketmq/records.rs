//! Well-framed records -> one row per message, with the checks that quarantine a record.
//!
//! The checks, in the reference's order (`formats/rocketmq_commitlog.py::_python_messages`), the first
//! failing one giving the reason: timestamps a Spark TIMESTAMP holds, BODYCRC, the inner
//! batch, a UTF-8 topic, UTF-8 properties. Rows are made for the records that pass.

use super::batch::{unwrap, Mini};
use super::columns::{Derived, Rules};
use super::hosts::{format_host, message_id};
use super::inflate::Inflater;
use super::layout::{body_length_at, host_width, BORNHOST_V6_FLAG, BORN_HOST_AT, COMPRESSED_FLAG, MAGIC_V2,
                    NEED_UNWRAP_FLAG, STOREHOST_V6_FLAG};
use super::properties::Kept;
use crate::buffers::Binary;
use crate::names::NameCodes;
use crate::read::{be_i16, be_i32, be_i64};
use crate::text::{same, utf8};

/// Epoch milliseconds a Spark TIMESTAMP holds (years 1..9999).
const MS_MIN: i64 = -62_135_596_800_000;
const MS_MAX: i64 = 253_402_300_799_999;

const NOT_UTF8_PROPERTIES: &str = "PROPERTIES are not valid UTF-8";

/// Where the fields of one record sit.
struct Record {
    p: usize,
    size: i64,
    sysflag: i32,
    store_ts_at: usize,
    store_at: usize,
    recon_at: usize,
    body: (usize, usize),
    topic: (usize, usize),
    props: (usize, usize),
}

impl Record {
    fn at(buf: &[u8], p: i64, size: i64) -> Record {
        let p = p as usize;
        let sysflag = be_i32(buf, p + 36);
        let store_ts_at = p + BORN_HOST_AT + host_width(sysflag & BORNHOST_V6_FLAG != 0);
        let store_at = store_ts_at + 8;
        let recon_at = store_at + host_width(sysflag & STOREHOST_V6_FLAG != 0);
        let body_at = p + body_length_at(sysflag) + 4;
        let blen = be_i32(buf, body_at - 4) as usize;
        let tl_at = body_at + blen;
        let v2 = be_i32(buf, p + 4) == MAGIC_V2;
        let (tlen, topic_at) = if v2 { (be_i16(buf, tl_at) as usize, tl_at + 2) } else { (buf[tl_at] as i8 as usize, tl_at + 1) };
        let pl_at = topic_at + tlen;
        let plen = be_i16(buf, pl_at) as usize;
        Record { p, size, sysflag, store_ts_at, store_at, recon_at, body: (body_at, body_at + blen),
                 topic: (topic_at, pl_at), props: (pl_at + 2, pl_at + 2 + plen) }
    }

    /// The record's own message (when it is no inner batch).
    #[inline(always)]
    fn own(&self, buf: &[u8]) -> Mini {
        Mini { pos: self.p as i64, flag: be_i32(buf, self.p + 16), crc: be_i32(buf, self.p + 8), body: span(self.body),
               props: span(self.props) }
    }

    /// The messages of an inner batch (None: the record is a message of its own, [`Self::own`]),
    /// or why the record is bad.
    fn check(&self, buf: &[u8], verify_crc: bool) -> Result<Option<Vec<Mini>>, String> {
        let born = be_i64(buf, self.p + 40);
        if !(MS_MIN..=MS_MAX).contains(&born) {
            return Err(format!("BORNTIMESTAMP {born} is not a time"));
        }
        let store = be_i64(buf, self.store_ts_at);
        if !(MS_MIN..=MS_MAX).contains(&store) {
            return Err(format!("STORETIMESTAMP {store} is not a time"));
        }
        let stored = be_i32(buf, self.p + 8);
        if verify_crc {
            let got = (crc32fast::hash(&buf[self.body.0..self.body.1]) & 0x7FFF_FFFF) as i32;
            if got != stored {
                return Err(format!("BODYCRC mismatch: stored {stored}, the body's CRC32 is {got}"));
            }
        }
        let messages = if self.sysflag & NEED_UNWRAP_FLAG == 0 {
            None
        } else if self.sysflag & COMPRESSED_FLAG != 0 {
            return Err("compressed inner batch (batches are never compressed)".into());
        } else {
            Some(unwrap(buf, self.body.0 as i64, self.body.1 as i64)?)
        };
        if !utf8(&buf[self.topic.0..self.topic.1]) {
            return Err("TOPIC is not valid UTF-8".into());
        }
        // A record's own property string is checked as it is parsed (`Decoder::record`); an
        // inner batch's are all checked before any of its rows is made.
        if let Some(minis) = &messages {
            if minis.iter().any(|m| !utf8(&buf[m.props.0 as usize..m.props.1 as usize])) {
                return Err(NOT_UTF8_PROPERTIES.into());
            }
        }
        Ok(messages)
    }
}

fn span((a, b): (usize, usize)) -> (i64, i64) {
    (a as i64, b as i64)
}

/// A host column. A chunk's records come from a few producers and one broker, so the texts
/// of the last few hosts are kept with their raw fields (8 bytes for IPv4, 20 for IPv6) and
/// each host is formatted once: an IPv6 text costs a few allocations to write.
#[derive(Default)]
pub struct Hosts {
    pub out: Binary,
    seen: Vec<Seen>,
    /// The entry the next new host replaces once `seen` is full.
    next: usize,
    text: String,
}

/// A host seen in the chunk: its raw field and its text.
struct Seen {
    raw: Vec<u8>,
    text: Vec<u8>,
}

/// Hosts remembered per column. Looked up in order: the usual chunk has one to a few, and a
/// search of a few entries costs less than hashing 20 bytes (a direct-mapped table of hashed
/// slots was tried: two producers whose fields shared a slot missed on most rows).
const HOSTS_SEEN: usize = 8;

impl Hosts {
    fn push(&mut self, raw: &[u8]) {
        if let Some(hit) = self.seen.iter().find(|s| same(&s.raw, raw)) {
            self.out.push(&hit.text);
            return;
        }
        self.text.clear();
        format_host(raw, &mut self.text);
        self.out.push(self.text.as_bytes());
        let entry = Seen { raw: raw.to_vec(), text: self.text.as_bytes().to_vec() };
        if self.seen.len() < HOSTS_SEEN {
            self.seen.push(entry);
        } else {
            self.seen[self.next] = entry;
            self.next = (self.next + 1) % HOSTS_SEEN;
        }
    }
}

/// Parsed properties of every row: kept entries (the `headers` map), the first UNIQ_KEY.
#[derive(Default)]
pub struct Props {
    pub keys: Binary,
    pub values: Binary,
    pub uniq_first: Binary,
    pub uniq_first_valid: Vec<bool>,
}

/// One row per message of the records that pass every check.
#[derive(Default)]
pub struct Messages {
    pub reasons: Vec<(usize, String)>,
    pub outer: Vec<i64>,
    pub pos: Vec<i64>,
    pub flag: Vec<i32>,
    pub crc: Vec<i32>,
    pub length: Vec<i64>,
    pub queue_id: Vec<i32>,
    pub queue_offset: Vec<i64>,
    pub physical_offset: Vec<i64>,
    pub sysflag: Vec<i32>,
    pub born_ms: Vec<i64>,
    pub store_ms: Vec<i64>,
    pub reconsume: Vec<i32>,
    pub prepared: Vec<i64>,
    pub topic: Binary,
    pub body: Binary,
    pub born_host: Hosts,
    pub store_host: Hosts,
    pub message_id: Binary,
    pub props: Props,
    pub derived: Derived,
    /// With `decompress`: what inflates the compressed bodies as they are pushed, and the rows
    /// whose body it left compressed (for the Python step).
    pub inflater: Option<Inflater>,
    pub left_compressed: Vec<usize>,
}

impl Messages {
    fn new() -> Self {
        let mut m = Messages { derived: Derived::new(0), ..Default::default() };
        for b in [&mut m.topic, &mut m.body, &mut m.born_host.out, &mut m.store_host.out, &mut m.message_id,
                  &mut m.props.keys, &mut m.props.values, &mut m.props.uniq_first] {
            *b = Binary::with_capacity(0, 0);
        }
        m
    }

    #[allow(clippy::too_many_arguments)]
    /// Room for about `n` rows in the fixed-width columns (more for inner batches).
    fn reserve(&mut self, n: usize) {
        for v in [&mut self.outer, &mut self.pos, &mut self.length, &mut self.queue_offset, &mut self.physical_offset,
                  &mut self.born_ms, &mut self.store_ms, &mut self.prepared] {
            v.reserve(n);
        }
        for v in [&mut self.flag, &mut self.crc, &mut self.queue_id, &mut self.sysflag, &mut self.reconsume] {
            v.reserve(n);
        }
        self.message_id.data.reserve(32 * n);
        self.message_id.offsets.reserve(n);
        for b in [&mut self.topic, &mut self.born_host.out, &mut self.store_host.out] {
            b.offsets.reserve(n);
            b.data.reserve(16 * n);
        }
        self.body.offsets.reserve(n);
        self.props.keys.offsets.reserve(8 * n);
        self.props.keys.data.reserve(64 * n);
        self.props.values.offsets.reserve(8 * n);
        self.props.values.data.reserve(96 * n);
        self.props.uniq_first.offsets.reserve(n);
        self.props.uniq_first.data.reserve(32 * n);
        self.props.uniq_first_valid.reserve(n);
        self.derived = Derived::new(n);
    }

    /// A row of message `mini` of record `r` (the `index`-th of the record), its properties
    /// parsed into `kept`.
    #[allow(clippy::too_many_arguments)]
    fn push(&mut self, buf: &[u8], i: usize, r: &Record, index: i64, mini: &Mini, kept: &Kept<'_>, rules: &Rules) {
        let p = r.p;
        self.outer.push(i as i64);
        self.pos.push(mini.pos);
        self.flag.push(mini.flag);
        self.crc.push(mini.crc);
        self.length.push(if index == 0 { r.size } else { 0 }); // a batch's bytes count on its first row
        self.queue_id.push(be_i32(buf, p + 12));
        self.queue_offset.push(be_i64(buf, p + 20) + index);
        self.physical_offset.push(be_i64(buf, p + 28));
        self.sysflag.push(r.sysflag);
        self.born_ms.push(be_i64(buf, p + 40));
        self.store_ms.push(be_i64(buf, r.store_ts_at));
        self.reconsume.push(be_i32(buf, r.recon_at));
        self.prepared.push(be_i64(buf, r.recon_at + 4));
        self.topic.push(&buf[r.topic.0..r.topic.1]);
        let body = &buf[mini.body.0 as usize..mini.body.1 as usize];
        if r.sysflag & COMPRESSED_FLAG != 0 && self.inflater.is_some() {
            self.push_inflated(body, r.sysflag); // never on a batch's messages (checked)
        } else {
            self.body.push(body);
        }
        self.born_host.push(&buf[p + BORN_HOST_AT..r.store_ts_at]);
        self.store_host.push(&buf[r.store_at..r.recon_at]);
        message_id(&buf[r.store_at..r.recon_at], &buf[p + 28..p + 36], &mut self.message_id.data);
        self.message_id.offsets.push(self.message_id.data.len() as i32);
        self.add_properties(kept);
        self.derived.push(rules, &kept.entries, r.sysflag, be_i64(buf, p + 40), &buf[r.topic.0..r.topic.1]);
    }

    /// A compressed body, inflated where the inflater takes it, else as stored (its row noted
    /// in `left_compressed`). Out of `push`'s way: few records are compressed.
    #[cold]
    #[inline(never)]
    fn push_inflated(&mut self, body: &[u8], sysflag: i32) {
        let inf = self.inflater.as_mut().expect("called with an inflater");
        if inf.append(body, sysflag, &mut self.body.data) {
            self.body.offsets.push(self.body.data.len() as i32);
        } else {
            self.left_compressed.push(self.body.offsets.len() - 1);
            self.body.push(body);
        }
    }

    fn add_properties(&mut self, kept: &Kept<'_>) {
        let pr = &mut self.props;
        for &(_, k, v) in &kept.entries {
            pr.keys.push(k);
            pr.values.push(v);
        }
        pr.uniq_first.push(kept.first_uniq.unwrap_or(b""));
        pr.uniq_first_valid.push(kept.first_uniq.is_some());
    }
}

/// Decodes records one at a time, as they are found or from a list of them.
pub struct Decoder<'a> {
    buf: &'a [u8],
    verify_crc: bool,
    rules: &'a Rules,
    out: Messages,
    names: NameCodes<'a>,
    kept: Kept<'a>,
}

impl<'a> Decoder<'a> {
    /// `bytes`: about how many record bytes will follow (room for the bodies at once, so
    /// growing never copies them; pages are only touched as they are written).
    pub fn new(buf: &'a [u8], verify_crc: bool, rules: &'a Rules, records: usize, bytes: usize) -> Self {
        let mut out = Messages::new();
        out.body.data.reserve(bytes);
        out.reserve(records);
        Decoder { buf, verify_crc, rules, out, names: NameCodes::default(), kept: Kept::default() }
    }

    /// Record `i` of the chunk, at `p` with TOTALSIZE `size`, already checked by the framing walk.
    pub fn record(&mut self, i: usize, p: i64, size: i64) {
        let r = Record::at(self.buf, p, size);
        let Decoder { buf, verify_crc, rules, out, names, kept } = self;
        let (buf, rules) = (*buf, *rules);
        match r.check(buf, *verify_crc) {
            Err(why) => out.reasons.push((i, why)),
            // The usual record, a message of its own: its properties are checked as they are parsed.
            // Its `Mini` is made here, not moved out of `check`'s result: moved, it was stored field
            // by field and read back in wider loads, which waited on those stores every record
            // (perf: the hottest instruction of a pass; `rmq_chunk` 6-7 % faster made here).
            Ok(None) => {
                let mini = r.own(buf);
                let text = &buf[mini.props.0 as usize..mini.props.1 as usize];
                let derived = &mut out.derived;
                let ascii = kept.parse(text, names, |name| derived.name(rules, name));
                if !ascii && !utf8(text) {
                    out.reasons.push((i, NOT_UTF8_PROPERTIES.into()));
                } else {
                    out.push(buf, i, &r, 0, &mini, kept, rules);
                }
            }
            Ok(Some(minis)) => {
                for (index, mini) in minis.iter().enumerate() {
                    let derived = &mut out.derived;
                    kept.parse(&buf[mini.props.0 as usize..mini.props.1 as usize], names, |name| derived.name(rules, name));
                    out.push(buf, i, &r, index as i64, mini, kept, rules);
                }
            }
        }
    }

    /// Inflate the compressed bodies (`decompress`) as their rows are made; `codec_names[t]`:
    /// the codec of COMPRESSIONTYPE `t`.
    pub fn inflating(mut self, codec_names: &[String]) -> Self {
        self.out.inflater = Inflater::new(codec_names, self.buf.len());
        self
    }

    pub fn finish(self) -> Messages {
        self.out
    }
}

/// Decode the records at `positions` (TOTALSIZE `lengths`), already checked by the framing walk.
#[cfg(test)]
pub fn decode(buf: &[u8], positions: &[i64], lengths: &[i64], verify_crc: bool, rules: &Rules) -> Messages {
    let mut d = Decoder::new(buf, verify_crc, rules, positions.len(), buf.len());
    for (i, (&p, &size)) in positions.iter().zip(lengths).enumerate() {
        d.record(i, p, size);
    }
    d.finish()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::rocketmq::layout::tests::record;

    fn rules() -> Rules {
        Rules { delay_levels: vec![1000], reserved: Default::default(), system_topics: Default::default(), system_prefix: b"rmq_sys_".to_vec() }
    }

    #[test]
    fn the_real_brokers_record_shape_decodes() {
        let rec = record(0, b"Once, there was a chance for me!", "abc", b"UNIQ_KEY\x01u1\x02TAGS\x01t\x02");
        let m = decode(&rec, &[0], &[rec.len() as i64], true, &rules());
        assert!(m.reasons.is_empty());
        assert_eq!(m.topic.data, b"abc");
        assert_eq!(m.born_host.out.data, b"127.0.0.1:0");
        assert_eq!(m.store_host.out.data, b"192.168.71.1:8123");
        assert_eq!(m.crc, vec![151131488]);
        assert_eq!(m.props.keys.data, b"UNIQ_KEYTAGS");
        assert_eq!((m.props.uniq_first.data.as_slice(), m.props.uniq_first_valid.as_slice()), (&b"u1"[..], &[true][..]));
    }

    #[test]
    fn hosts_come_out_as_formatted_whether_remembered_or_not() {
        // 12 hosts (more than are remembered), IPv4 and IPv6, in a repeating pattern.
        let raws: Vec<Vec<u8>> = (0..12u8)
            .map(|k| if k % 3 == 0 { [&[0xfd, 0][..], &[0; 13], &[k, 0, 0, 0x82, 0x35]].concat() } else { vec![10, 1, 0, k, 0, 0, 0xcb, k] })
            .collect();
        let mut hosts = Hosts::default();
        let mut want = Binary::default();
        for step in 0..200usize {
            let raw = &raws[(step * 7 + step / 13) % if step < 100 { 3 } else { 12 }];
            hosts.push(raw);
            let mut text = String::new();
            format_host(raw, &mut text);
            want.push(text.as_bytes());
        }
        assert_eq!((hosts.out.offsets, hosts.out.data), (want.offsets, want.data));
    }

    #[test]
    fn a_wrong_crc_and_a_bad_topic_are_reasons() {
        let mut rec = record(0, b"body", "t", b"");
        rec[11] ^= 1;
        let m = decode(&rec, &[0], &[rec.len() as i64], true, &rules());
        assert!(m.reasons[0].1.starts_with("BODYCRC mismatch: stored "));
        assert!(decode(&rec, &[0], &[rec.len() as i64], false, &rules()).reasons.is_empty());
        let mut bad_topic = record(0, b"body", "t", b"");
        let at = bad_topic.len() - 3;
        bad_topic[at] = 0xff;
        assert_eq!(decode(&bad_topic, &[0], &[bad_topic.len() as i64], true, &rules()).reasons[0].1, "TOPIC is not valid UTF-8");
    }
}

