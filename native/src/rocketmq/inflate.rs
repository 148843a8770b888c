//! Producer-compressed bodies (SYSFLAG bit 0, the codec in bits 8-10; spec §1.5), inflated
//! when a source asks for it (`decompress=true`).
//!
//! A body is inflated here only when it is one whole, checked stream of its codec. Anything else
//! (a broken stream, bytes after its end, a codec this module does not know) is left as stored
//! with its `compression` named, and the Python step (`formats/rocketmq_commitlog.py`,
//! `_decompress`) decides it: it inflates what its libraries take and quarantines the rest with
//! their error text, so the reason a record is quarantined with is worded in one place.

use std::io::Read;

use crate::buffers::Binary;

use super::layout::COMPRESSED_FLAG;

/// The bodies of a chunk's rows, those flagged compressed inflated where this module takes
/// them (`codec_names[(sysflag >> 8) & 7]` names the codec); and for each row whether its body
/// is still compressed (flagged, and left for the Python step).
pub fn bodies(stored: Binary, sysflag: &[i32], codec_names: &[String]) -> (Binary, Vec<bool>) {
    let flagged = |f: i32| f & COMPRESSED_FLAG != 0;
    if !sysflag.iter().any(|&f| flagged(f)) {
        return (stored, vec![false; sysflag.len()]);
    }
    let mut out = Binary::with_capacity(sysflag.len(), stored.data.len());
    let mut still = Vec::with_capacity(sysflag.len());
    for (i, &f) in sysflag.iter().enumerate() {
        let body = &stored.data[stored.offsets[i] as usize..stored.offsets[i + 1] as usize];
        let plain = if flagged(f) { inflate(body, &codec_names[((f >> 8) & 7) as usize]) } else { None };
        // Arrow's int32 offsets bound a column's bytes; a chunk that would pass them is the
        // Python step's to refuse, as before.
        let plain = plain.filter(|p| out.data.len() + p.len() <= i32::MAX as usize);
        still.push(flagged(f) && plain.is_none());
        out.push(plain.as_deref().unwrap_or(body));
    }
    (out, still)
}

/// `body` decompressed by `codec` ("zlib", "lz4" frames, "zstd" frames), or None where it is not
/// one whole stream of that codec that passes the codec's checks.
pub fn inflate(body: &[u8], codec: &str) -> Option<Vec<u8>> {
    if body.is_empty() {
        return None;
    }
    match codec {
        "zlib" => zlib(body),
        "lz4" => whole(lz4_flex::frame::FrameDecoder::new(body), |d| d.get_ref().is_empty()),
        "zstd" => whole(zstd::stream::read::Decoder::with_buffer(body).ok()?, |d| d.get_ref().is_empty()),
        _ => None,
    }
}

/// Everything `reader` gives, if it gives it without an error and `done` says it read its input to the end.
fn whole<R: Read>(mut reader: R, done: impl Fn(&R) -> bool) -> Option<Vec<u8>> {
    let mut out = Vec::new();
    reader.read_to_end(&mut out).ok()?;
    done(&reader).then_some(out)
}

/// A zlib stream (RFC 1950) filling `body` exactly: a header Python's zlib takes (deflate, a
/// window of at most 32 KiB, no preset dictionary), the Adler-32 checked at its end.
fn zlib(body: &[u8]) -> Option<Vec<u8>> {
    use flate2::{Decompress, FlushDecompress, Status};
    let (cmf, flg) = (*body.first()?, *body.get(1)?);
    if cmf & 0x0F != 8 || cmf >> 4 > 7 || (u16::from(cmf) << 8 | u16::from(flg)) % 31 != 0 || flg & 0x20 != 0 {
        return None;
    }
    let mut d = Decompress::new(true);
    let mut out = Vec::with_capacity(body.len().saturating_mul(4).max(64));
    loop {
        let (read, made) = (d.total_in(), d.total_out());
        match d.decompress_vec(&body[read as usize..], &mut out, FlushDecompress::None).ok()? {
            Status::StreamEnd => break,
            _ if out.len() == out.capacity() => out.reserve(out.len()),
            _ if d.total_in() == read && d.total_out() == made => return None, // the input ends inside the stream
            _ => {}
        }
    }
    (d.total_in() as usize == body.len()).then_some(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write;

    fn zlib_of(plain: &[u8]) -> Vec<u8> {
        let mut e = flate2::write::ZlibEncoder::new(Vec::new(), flate2::Compression::new(5));
        e.write_all(plain).unwrap();
        e.finish().unwrap()
    }

    #[test]
    fn whole_streams_inflate_and_anything_else_is_left_for_python() {
        let plain = b"{\"a\":\"zzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzz\"}".repeat(200);
        let z = zlib_of(&plain);
        assert!(inflate(&z, "zlib").as_deref() == Some(&plain[..]));
        let mut lz = lz4_flex::frame::FrameEncoder::new(Vec::new());
        lz.write_all(&plain).unwrap();
        let lz = lz.finish().unwrap();
        assert!(inflate(&lz, "lz4").as_deref() == Some(&plain[..]));
        let zs = zstd::stream::encode_all(&plain[..], 3).unwrap();
        assert!(inflate(&zs, "zstd").as_deref() == Some(&plain[..]));

        let mut adler = z.clone();
        *adler.last_mut().unwrap() ^= 1;
        let trailing = [&z[..], b"x"].concat();
        for (body, codec) in [(&adler[..], "zlib"), (&trailing[..], "zlib"), (&z[..z.len() - 3], "zlib"),
                              (b"not zlib at all", "zlib"), (&z[..], "lz4"), (&z[..], "zstd"), (&zs[..], "unknown(5)"),
                              (&zs[..zs.len() - 1], "zstd"), (&[&zs[..], b"!"].concat()[..], "zstd"), (b"", "zlib")] {
            assert!(inflate(body, codec).is_none(), "{codec}, {} bytes", body.len());
        }
    }

    #[test]
    fn a_chunk_keeps_what_it_cannot_inflate_as_stored_and_says_so() {
        let names: Vec<String> = ["zlib", "lz4", "zstd", "zlib", "unknown(4)", "unknown(5)", "unknown(6)", "unknown(7)"]
            .iter().map(|s| s.to_string()).collect();
        let plain = b"abcabcabc".repeat(50);
        let mut stored = Binary::with_capacity(4, 0);
        for b in [&zlib_of(&plain)[..], b"garbage", b"as is", &zlib_of(b"")[..]] {
            stored.push(b);
        }
        let flags = [0x301, 0x301, 0, 0x001];
        let (out, still) = bodies(stored, &flags, &names);
        let at = |i: usize| &out.data[out.offsets[i] as usize..out.offsets[i + 1] as usize];
        assert!((at(0), at(1), at(2), at(3)) == (&plain[..], &b"garbage"[..], &b"as is"[..], &b""[..]));
        assert_eq!(still, [false, true, false, false]);
    }
}
