//! Record layout constants (spec §1.2-1.4) and where the variable fields sit.

pub const MAGIC_V1: i32 = -626843481; // DA A3 20 A7
pub const MAGIC_V2: i32 = -626843477; // DA A3 20 AB
pub const MAGIC_BLANK: i32 = -875286124; // CB D4 31 94
/// The smallest v1 record: the fixed part with an empty body, topic and properties.
pub const MIN_RECORD: i64 = 91;

pub const COMPRESSED_FLAG: i32 = 0x1;
pub const BORNHOST_V6_FLAG: i32 = 0x10;
pub const STOREHOST_V6_FLAG: i32 = 0x20;
pub const NEED_UNWRAP_FLAG: i32 = 0x40;
pub const BORN_HOST_AT: usize = 48;

/// Width of a host field: 4 (or 16) address bytes and an int32 port.
pub fn host_width(v6: bool) -> usize {
    if v6 { 20 } else { 8 }
}

/// Offset of BODYLENGTH inside a record, after the two host fields of `sysflag`'s widths.
pub fn body_length_at(sysflag: i32) -> usize {
    BORN_HOST_AT + host_width(sysflag & BORNHOST_V6_FLAG != 0) + 8 + host_width(sysflag & STOREHOST_V6_FLAG != 0) + 12
}

#[cfg(test)]
pub mod tests {
    use super::*;

    /// A v1 record with IPv4 hosts 127.0.0.1:0 (born) and 192.168.71.1:8123 (store).
    pub fn record(phys: i64, body: &[u8], topic: &str, props: &[u8]) -> Vec<u8> {
        let size = 91 + body.len() + topic.len() + props.len();
        let mut r = Vec::with_capacity(size);
        r.extend_from_slice(&(size as i32).to_be_bytes());
        r.extend_from_slice(&MAGIC_V1.to_be_bytes());
        r.extend_from_slice(&((crc32fast::hash(body) & 0x7FFF_FFFF) as i32).to_be_bytes());
        r.extend_from_slice(&0i32.to_be_bytes()); // queue id
        r.extend_from_slice(&0i32.to_be_bytes()); // flag
        r.extend_from_slice(&0i64.to_be_bytes()); // queue offset
        r.extend_from_slice(&phys.to_be_bytes());
        r.extend_from_slice(&0i32.to_be_bytes()); // sysflag
        r.extend_from_slice(&1_700_000_000_000i64.to_be_bytes());
        r.extend_from_slice(&[127, 0, 0, 1, 0, 0, 0, 0]);
        r.extend_from_slice(&1_700_000_000_001i64.to_be_bytes());
        r.extend_from_slice(&[192, 168, 71, 1, 0, 0, 0x1f, 0xbb]);
        r.extend_from_slice(&0i32.to_be_bytes()); // reconsume times
        r.extend_from_slice(&0i64.to_be_bytes()); // prepared transaction offset
        r.extend_from_slice(&(body.len() as i32).to_be_bytes());
        r.extend_from_slice(body);
        r.push(topic.len() as u8);
        r.extend_from_slice(topic.as_bytes());
        r.extend_from_slice(&(props.len() as i16).to_be_bytes());
        r.extend_from_slice(props);
        assert_eq!(r.len(), size);
        r
    }

    #[test]
    fn body_length_follows_the_host_widths() {
        assert_eq!(body_length_at(0), 84);
        assert_eq!(body_length_at(BORNHOST_V6_FLAG | STOREHOST_V6_FLAG), 108);
    }
}
