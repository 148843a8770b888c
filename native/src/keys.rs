//! Producer-retry keys: the copy identity of each message row, as `transforms/dedup.py`'s
//! `dedup_key` makes it in Spark (a SHA-256 hex string), made here from a batch's columns in the
//! driver, which decides a micro-batch's retries before Spark writes it (`pipelines/io/sinks.py`).
//!
//! The text hashed is Spark's `concat_ws("|", ...)` of the key's parts, a null part left out:
//! - `u|topic|own id|deliveryCount` for a row with its own UNIQ_KEY (`producerUniqueId`, else
//!   `uniqueId`);
//! - else `t|topic|traceId|bornHost or ""|sha256 hex of the body` for a row with a `traceId`;
//! - no key for a broker-internal copy (`systemCopy`) or a row with neither.

use arrow_array::{Array, BinaryArray, BooleanArray, Int32Array, StringArray};
use sha2::{Digest, Sha256};

use crate::buffers::Binary;

/// The columns a key is made of (the source schema's types).
pub struct Columns<'a> {
    pub topic: &'a StringArray,
    pub producer_unique_id: &'a StringArray,
    pub unique_id: &'a StringArray,
    pub delivery_count: &'a Int32Array,
    pub trace_id: &'a StringArray,
    pub born_host: &'a StringArray,
    pub body: &'a BinaryArray,
    pub system_copy: &'a BooleanArray,
}

/// Keys of every row: the hex strings (empty where there is none), which rows have one, and
/// `hash_of` each key (0 where none).
pub struct Keys {
    pub text: Binary,
    pub valid: Vec<bool>,
    pub hash: Vec<i64>,
}

/// The hex digits of a key that its 60-bit hash is read from (`key_hash` in transforms/dedup.py:
/// Spark's `conv(substring(dedupKey, 1, 15), 16, 10)`).
const HASH_DIGITS: usize = 15;

fn text(a: &StringArray, i: usize) -> Option<&[u8]> {
    a.is_valid(i).then(|| a.value(i).as_bytes())
}

fn hex(digest: &[u8], out: &mut Vec<u8>) {
    const DIGITS: &[u8; 16] = b"0123456789abcdef";
    for b in digest {
        out.push(DIGITS[(b >> 4) as usize]);
        out.push(DIGITS[(b & 15) as usize]);
    }
}

/// `concat_ws("|", parts)`: the parts that are not null, joined (an empty one counts).
fn join(parts: &[Option<&[u8]>], out: &mut Vec<u8>) {
    out.clear();
    for (k, part) in parts.iter().flatten().enumerate() {
        if k > 0 {
            out.push(b'|');
        }
        out.extend_from_slice(part);
    }
}

pub fn keys(c: &Columns) -> Keys {
    let n = c.topic.len();
    let mut out = Keys { text: Binary::with_capacity(n, n * 64), valid: Vec::with_capacity(n), hash: Vec::with_capacity(n) };
    let (mut material, mut body_hex, mut digits) = (Vec::new(), Vec::with_capacity(64), Vec::new());
    for i in 0..n {
        let system = c.system_copy.is_valid(i) && c.system_copy.value(i);
        let own = text(c.producer_unique_id, i).or_else(|| text(c.unique_id, i));
        let topic = text(c.topic, i);
        let made = if system {
            false
        } else if let Some(own) = own {
            digits.clear();
            let counted = c.delivery_count.is_valid(i);
            if counted {
                digits.extend_from_slice(c.delivery_count.value(i).to_string().as_bytes());
            }
            join(&[Some(b"u".as_slice()), topic, Some(own), counted.then_some(digits.as_slice())], &mut material);
            true
        } else if let Some(trace) = text(c.trace_id, i) {
            body_hex.clear();
            let has_body = c.body.is_valid(i);
            if has_body {
                hex(&Sha256::digest(c.body.value(i)), &mut body_hex);
            }
            let born = text(c.born_host, i).unwrap_or(b"");
            join(&[Some(b"t".as_slice()), topic, Some(trace), Some(born), has_body.then_some(body_hex.as_slice())],
                 &mut material);
            true
        } else {
            false
        };
        if made {
            let at = out.text.data.len();
            hex(&Sha256::digest(&material), &mut out.text.data);
            let head = &out.text.data[at..at + HASH_DIGITS];
            out.hash.push(head.iter().fold(0i64, |h, d| (h << 4) | (*d as char).to_digit(16).unwrap_or(0) as i64));
        } else {
            out.hash.push(0);
        }
        out.valid.push(made);
        out.text.offsets.push(out.text.data.len() as i32);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn strings(v: &[Option<&str>]) -> StringArray {
        StringArray::from(v.to_vec())
    }

    fn key_of(material: &str) -> String {
        let mut out = Vec::new();
        hex(&Sha256::digest(material.as_bytes()), &mut out);
        String::from_utf8(out).unwrap()
    }

    #[test]
    fn keys_hash_the_parts_spark_joins() {
        let body_hex = key_of("paid");
        let topic = strings(&[Some("orders"), Some("orders"), None, Some("orders"), Some("orders")]);
        let producer = strings(&[Some("P1"), None, Some("P3"), None, None]);
        let unique = strings(&[Some("U1"), Some("U2"), None, None, None]);
        let delivery = Int32Array::from(vec![Some(0), None, Some(3), None, None]);
        let trace = strings(&[None, None, None, Some("42"), Some("42")]);
        let born = strings(&[None, None, None, None, Some("10.0.0.1:5")]);
        let body = BinaryArray::from(vec![Some(b"x".as_slice()), None, None, Some(b"paid".as_slice()), None]);
        let system = BooleanArray::from(vec![Some(false), None, None, Some(false), Some(true)]);
        let k = keys(&Columns { topic: &topic, producer_unique_id: &producer, unique_id: &unique,
                                delivery_count: &delivery, trace_id: &trace, born_host: &born, body: &body,
                                system_copy: &system });
        assert_eq!(k.valid, vec![true, true, true, true, false]);
        let texts: Vec<String> = (0..4).map(|i| {
            let (a, b) = (k.text.offsets[i] as usize, k.text.offsets[i + 1] as usize);
            String::from_utf8(k.text.data[a..b].to_vec()).unwrap()
        }).collect();
        assert_eq!(texts, vec![key_of("u|orders|P1|0"), key_of("u|orders|U2"), key_of("u|P3|3"),
                               key_of(&format!("t|orders|42||{body_hex}"))]);
        assert_eq!(k.hash[0], i64::from_str_radix(&texts[0][..15], 16).unwrap());
        assert_eq!((k.text.offsets[5] - k.text.offsets[4], k.hash[4]), (0, 0));
    }
}
