//! Inner batches (spec §5.7): one record whose body is a run of mini-records
//! `size:int32 magic:int32 bodyCRC:int32 flag:int32 bodyLen:int32 body propsLen:int16 props`.

use crate::read::{be_i16, be_i32};

/// One message of an inner batch: where it starts, its flag and CRC, body and property ranges.
#[derive(Debug, PartialEq)]
pub struct Mini {
    pub pos: i64,
    pub flag: i32,
    pub crc: i32,
    pub body: (i64, i64),
    pub props: (i64, i64),
}

/// The messages of the batch body `buf[a..b]`, or why it is not one (the reference's words).
pub fn unwrap(buf: &[u8], a: i64, b: i64) -> Result<Vec<Mini>, String> {
    let mut out = Vec::new();
    let mut q = a;
    while q < b {
        if b - q < 22 {
            return Err(format!("inner batch: {} bytes left at {q}, too few for a message", b - q));
        }
        let at = q as usize;
        let size = be_i32(buf, at) as i64;
        let (crc, flag, blen) = (be_i32(buf, at + 8), be_i32(buf, at + 12), be_i32(buf, at + 16) as i64);
        if blen < 0 || q + 22 + blen > b {
            return Err(format!("inner batch: body length {blen} at {q} runs past the batch"));
        }
        let plen = be_i16(buf, (q + 20 + blen) as usize) as i64;
        if plen < 0 || size != 22 + blen + plen || q + size > b {
            return Err(format!("inner batch: message size {size} at {q} disagrees with its lengths"));
        }
        out.push(Mini { pos: q, flag, crc, body: (q + 20, q + 20 + blen), props: (q + 22 + blen, q + 22 + blen + plen) });
        q += size;
    }
    if out.is_empty() {
        return Err("inner batch holds no message".into());
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn mini(body: &[u8], props: &[u8]) -> Vec<u8> {
        let mut m = ((22 + body.len() + props.len()) as i32).to_be_bytes().to_vec();
        m.extend_from_slice(&[0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 3]); // magic 0, crc 0, flag 3
        m.extend_from_slice(&(body.len() as i32).to_be_bytes());
        m.extend_from_slice(body);
        m.extend_from_slice(&(props.len() as i16).to_be_bytes());
        m.extend_from_slice(props);
        m
    }

    #[test]
    fn splits_a_batch_into_its_messages() {
        let mut buf = mini(b"one", b"a\x01b\x02");
        let second = buf.len() as i64;
        buf.extend(mini(b"two!", b""));
        let got = unwrap(&buf, 0, buf.len() as i64).unwrap();
        assert_eq!(got.len(), 2);
        assert_eq!(got[1], Mini { pos: second, flag: 3, crc: 0, body: (second + 20, second + 24), props: (second + 26, second + 26) });
    }

    #[test]
    fn broken_batches_say_why() {
        assert_eq!(unwrap(b"", 0, 0).unwrap_err(), "inner batch holds no message");
        let buf = mini(b"one", b"");
        assert_eq!(unwrap(&buf, 0, 10).unwrap_err(), "inner batch: 10 bytes left at 0, too few for a message");
        let mut bad = buf.clone();
        bad[3] += 1;
        assert_eq!(unwrap(&bad, 0, bad.len() as i64).unwrap_err(), "inner batch: message size 26 at 0 disagrees with its lengths");
    }
}
