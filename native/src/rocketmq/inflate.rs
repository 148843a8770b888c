//! Producer-compressed bodies (SYSFLAG bit 0, the codec in bits 8-10; spec §1.5), inflated
//! when a source asks for it (`decompress=true`).
//!
//! A body is inflated here only when it is one whole stream of its codec that the C library the
//! Python step uses takes, so it comes out as Python would make it. Anything else (a broken
//! stream, bytes after its end, a codec this module does not know) is left as stored with its
//! `compression` named, and the Python step (`formats/rocketmq_commitlog.py`, `_decompress`)
//! decides it: it inflates what its libraries take and quarantines the rest with their error
//! text, so the reason a record is quarantined with is worded in one place.

use super::layout::COMPRESSED_FLAG;

#[derive(Clone, Copy)]
enum Codec {
    Zlib,
    Lz4,
    Zstd,
    Other,
}

/// Inflates a chunk's compressed bodies into its body column, reusing the zlib and zstd
/// decoders' state from one body to the next (a zstd context made per body was 3 % of a pass).
pub struct Inflater {
    codecs: [Codec; 8],
    zlib: flate2::Decompress,
    zstd: zstd::stream::raw::Decoder<'static>,
    /// An LZ4 block's output (its frame's maximum block size, zeroed once and reused).
    lz4_block: Vec<u8>,
    /// The most bytes the body column may hold after an inflated body.
    column_limit: usize,
}

impl Inflater {
    /// `codec_names[t]`: the codec of COMPRESSIONTYPE `t` ("zlib", "lz4", "zstd"; any other name is
    /// one this module leaves to Python); `stored_room`: the most bytes the column's bodies left as
    /// stored can add (the chunk's length), kept free under Arrow's int32 offsets. None if the zstd
    /// context cannot be made.
    pub fn new(codec_names: &[String], stored_room: usize) -> Option<Self> {
        let mut codecs = [Codec::Other; 8];
        for (c, name) in codecs.iter_mut().zip(codec_names) {
            *c = match name.as_str() {
                "zlib" => Codec::Zlib,
                "lz4" => Codec::Lz4,
                "zstd" => Codec::Zstd,
                _ => Codec::Other,
            };
        }
        Some(Inflater { codecs, zlib: flate2::Decompress::new(true), zstd: zstd::stream::raw::Decoder::new().ok()?,
                        lz4_block: Vec::new(), column_limit: (i32::MAX as usize).saturating_sub(stored_room) })
    }

    /// Appends `body`, of a record flagged compressed with `sysflag`, inflated to `out`. False, and
    /// `out` as it was, where the body is not one whole stream of its codec that passes the codec's
    /// checks, or would take `out` past what Arrow's int32 offsets can address once the chunk's
    /// other bodies are in it too.
    pub fn append(&mut self, body: &[u8], sysflag: i32, out: &mut Vec<u8>) -> bool {
        debug_assert!(sysflag & COMPRESSED_FLAG != 0);
        let start = out.len();
        let ok = !body.is_empty()
            && match self.codecs[((sysflag >> 8) & 7) as usize] {
                Codec::Zlib => self.zlib_into(body, out),
                Codec::Lz4 => self.lz4_into(body, out),
                Codec::Zstd => self.zstd_into(body, out),
                Codec::Other => false,
            };
        if !ok || out.len() > self.column_limit {
            out.truncate(start);
            if out.capacity() > 2 * start + (64 << 20) {
                out.shrink_to(2 * start); // what a refused body grew is not handed on with the column
            }
            return false;
        }
        true
    }

    /// A zlib stream (RFC 1950) filling `body` exactly, read by zlib as Python's `zlib.decompress`
    /// reads it (a 32 KiB window; its header, a preset dictionary and the Adler-32 checked by zlib).
    fn zlib_into(&mut self, body: &[u8], out: &mut Vec<u8>) -> bool {
        use flate2::{FlushDecompress, Status};
        let d = &mut self.zlib;
        d.reset(true);
        out.reserve(body.len().saturating_mul(4).max(4096));
        loop {
            let (read, made) = (d.total_in(), d.total_out());
            match d.decompress_vec(&body[read as usize..], out, FlushDecompress::None) {
                Ok(Status::StreamEnd) => return d.total_in() as usize == body.len(),
                Err(_) => return false,
                Ok(_) if out.len() >= self.column_limit => return false, // past the column's room: refused as it grows
                Ok(_) if out.len() == out.capacity() => out.reserve(made as usize + 4096),
                Ok(_) if d.total_in() == read && d.total_out() == made => return false, // it ends inside the stream
                Ok(_) => {}
            }
        }
    }

    /// LZ4 frames (lz4_Frame_format.md) filling `body` exactly, read here and their blocks decoded
    /// by the LZ4 C library as its frame decoder does (`LZ4_decompress_safe_usingDict` into the
    /// frame's maximum block size, which decides where a block may end): the library cramjam's
    /// Python step uses. A frame reader per body would set up (lz4_flex's zero-fills) a buffer of
    /// that size each time: 4 MiB for Java's `LZ4FrameOutputStream`, RocketMQ's producer.
    fn lz4_into(&mut self, body: &[u8], out: &mut Vec<u8>) -> bool {
        let mut at = 0;
        while at < body.len() {
            match self.lz4_frame(&body[at..], out) {
                Some(used) => at += used,
                None => return false,
            }
        }
        true
    }

    /// One LZ4 frame at the start of `b` appended to `out`; the bytes it took. None where it is not a
    /// frame this reads whole with every check it carries (header, block and content checksums,
    /// content size). A dictionary id, reserved bits or another magic (legacy, skippable frames)
    /// are left to the Python step.
    fn lz4_frame(&mut self, b: &[u8], out: &mut Vec<u8>) -> Option<usize> {
        use twox_hash::XxHash32;
        let le32 = |at: usize| b.get(at..at + 4).map(|w| u32::from_le_bytes([w[0], w[1], w[2], w[3]]));
        let (flg, bd) = (*b.get(4)?, *b.get(5)?);
        if le32(0)? != 0x184D_2204 || flg >> 6 != 1 || flg & 0b11 != 0 || bd & 0x8F != 0 {
            return None;
        }
        let max_block: usize = match (bd >> 4) & 7 {
            4 => 64 << 10,
            5 => 256 << 10,
            6 => 1 << 20,
            7 => 4 << 20,
            _ => return None,
        };
        let (linked, block_sums, sized, summed) = (flg & 0x20 == 0, flg & 0x10 != 0, flg & 0x08 != 0, flg & 0x04 != 0);
        let mut at = if sized { 14 } else { 6 };
        let size = if sized { Some(u64::from_le_bytes(b.get(6..14)?.try_into().ok()?)) } else { None };
        if u32::from(*b.get(at)?) != (XxHash32::oneshot(0, &b[4..at]) >> 8) & 0xFF {
            return None;
        }
        at += 1;
        if self.lz4_block.len() < max_block {
            self.lz4_block.resize(max_block, 0);
        }
        let start = out.len();
        loop {
            let word = le32(at)?;
            at += 4;
            if word == 0 {
                break; // the end mark
            }
            let len = (word & 0x7FFF_FFFF) as usize;
            let data = b.get(at..at.checked_add(len)?).filter(|_| len <= max_block)?;
            at += len;
            if block_sums {
                (le32(at)? == XxHash32::oneshot(0, data)).then_some(())?;
                at += 4;
            }
            if word & 0x8000_0000 != 0 {
                out.extend_from_slice(data); // stored uncompressed
                continue;
            }
            // Linked blocks may copy from the frame's last 64 KiB of output.
            let made = &out[start..];
            let dict = if linked { &made[made.len().saturating_sub(64 << 10)..] } else { &[][..] };
            let n = lz4_block(data, &mut self.lz4_block[..max_block], dict)?;
            out.extend_from_slice(&self.lz4_block[..n]);
            if out.len() > self.column_limit {
                return None; // past the column's room: refused as it grows
            }
        }
        if size.is_some_and(|n| n != (out.len() - start) as u64) {
            return None;
        }
        if summed {
            (le32(at)? == XxHash32::oneshot(0, &out[start..])).then_some(())?;
            at += 4;
        }
        Some(at)
    }

    /// One zstd frame (its content checksum checked where it has one) filling `body` exactly.
    fn zstd_into(&mut self, body: &[u8], out: &mut Vec<u8>) -> bool {
        use zstd::stream::raw::Operation;
        if self.zstd.reinit().is_err() {
            return false;
        }
        let (start, limit, mut read) = (out.len(), self.column_limit, 0);
        let mut filled = start;
        // The first call reads the frame's header with ZSTD_STREAM_ROOM of room, as cramjam's reader
        // does: libzstd decodes a frame whose content fits the room in one pass, which skips the
        // window checks streaming applies, so only a frame cramjam also reads in one pass is.
        out.resize(start + ZSTD_STREAM_ROOM, 0);
        loop {
            if filled == out.len() {
                let grown = filled + (filled - start).max(ZSTD_STREAM_ROOM);
                if grown > limit {
                    return false;
                }
                out.resize(grown, 0);
            }
            let Ok(st) = self.zstd.run_on_buffers(&body[read..], &mut out[filled..]) else {
                return false;
            };
            read += st.bytes_read;
            filled += st.bytes_written;
            if st.remaining == 0 {
                // One frame, ending with the body: a second frame (its header read with another
                // room than cramjam's) is left to the Python step.
                out.truncate(filled);
                return read == body.len();
            }
            if st.bytes_read == 0 && st.bytes_written == 0 && filled < out.len() {
                return false; // the body ends inside the frame
            }
        }
    }
}

/// The output room of cramjam's zstd reader's first read (std's `io::copy` buffer): a frame whose
/// content fits it is decoded in one pass (`ZSTD_decompressStream`'s shortcut), else streamed.
const ZSTD_STREAM_ROOM: usize = 8192;

extern "C" {
    // In the LZ4 C library lz4-sys builds (lz4.h), not among the functions that crate declares.
    fn LZ4_decompress_safe_usingDict(src: *const std::ffi::c_char, dst: *mut std::ffi::c_char, src_size: i32,
                                     dst_capacity: i32, dict_start: *const std::ffi::c_char, dict_size: i32) -> i32;
}

/// One compressed LZ4 block decoded into `dst` (its whole length the capacity), matches reaching
/// back into `dict`; the bytes it made, None where the library refuses the block.
fn lz4_block(data: &[u8], dst: &mut [u8], dict: &[u8]) -> Option<usize> {
    use lz4_sys as _; // links the library
    let (src_len, cap, dict_len) = (i32::try_from(data.len()).ok()?, i32::try_from(dst.len()).ok()?,
                                    i32::try_from(dict.len()).ok()?);
    // SAFETY: each pointer and its length describe one live slice; the library writes at most
    // `cap` bytes to `dst` and reads only `src_len` bytes of `data` and `dict_len` of `dict`.
    let n = unsafe {
        LZ4_decompress_safe_usingDict(data.as_ptr().cast(), dst.as_mut_ptr().cast(), src_len, cap,
                                      dict.as_ptr().cast(), dict_len)
    };
    usize::try_from(n).ok()
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write;

    fn names() -> Vec<String> {
        ["zlib", "lz4", "zstd", "zlib", "unknown(4)", "unknown(5)", "unknown(6)", "unknown(7)"]
            .iter().map(|s| s.to_string()).collect()
    }

    /// `body` inflated as the codec `name` says, or None.
    fn inflate(body: &[u8], name: &str) -> Option<Vec<u8>> {
        let t = names().iter().position(|n| n == name).unwrap_or(5) as i32;
        let mut out = b"before".to_vec();
        let ok = Inflater::new(&names(), 0).unwrap().append(body, COMPRESSED_FLAG | t << 8, &mut out);
        assert!(ok || out == b"before", "a body left as it was leaves the column as it was");
        ok.then(|| out[6..].to_vec())
    }

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
    fn lz4_frames_of_every_kind_inflate_and_a_broken_check_is_left_for_python() {
        use lz4_flex::frame::{BlockMode, BlockSize, FrameEncoder, FrameInfo};
        let plain: Vec<u8> = (0..300_000u32).map(|i| (i % 251) as u8 ^ (i / 7000) as u8).collect();
        for (size, mode, block_sums, sized, summed) in [(BlockSize::Max64KB, BlockMode::Linked, true, true, false),
                                                        (BlockSize::Max256KB, BlockMode::Independent, false, false, true),
                                                        (BlockSize::Max4MB, BlockMode::Independent, false, false, false),
                                                        (BlockSize::Max1MB, BlockMode::Linked, true, true, true)] {
            let mut info = FrameInfo::new();
            (info.block_size, info.block_mode, info.block_checksums, info.content_checksum) = (size, mode, block_sums, summed);
            info.content_size = sized.then_some(plain.len() as u64);
            let mut e = FrameEncoder::with_frame_info(info, Vec::new());
            e.write_all(&plain).unwrap();
            let frame = e.finish().unwrap();
            assert!(inflate(&frame, "lz4").as_deref() == Some(&plain[..]), "{size:?} {mode:?}");
            let two = [&frame[..], &frame[..]].concat();
            assert_eq!(inflate(&two, "lz4").map(|p| p.len()), Some(2 * plain.len()));
            if block_sums || summed {
                let mut bad = frame.clone();
                let at = if summed { bad.len() - 1 } else { bad.len() - 5 }; // the content checksum, or the last block's
                bad[at] ^= 1;
                assert!(inflate(&bad, "lz4").is_none(), "{size:?} {mode:?}");
            }
            assert!(inflate(&frame[..frame.len() - 1], "lz4").is_none());
        }
    }

    #[test]
    fn streams_the_c_libraries_refuse_are_left_for_python() {
        let hex = |h: &str| (0..h.len()).step_by(2).map(|i| u8::from_str_radix(&h[i..i + 2], 16).unwrap()).collect::<Vec<u8>>();
        // A match before the stream's start (zlib: "invalid distance too far back"; miniz_oxide
        // streaming read it as zeros); an LZ4 block whose last sequence is a match, with and
        // without a content checksum (the C library: "decompressionFailed").
        // A zstd frame with a window of 2^28 (more than streaming allows) and 1 MiB of content,
        // which a one-pass decode would take: cramjam streams it and refuses it.
        let window = "28b52ffd8090000010000200107a0200107a0200107a0200107a0200107a0200107a0200107a0300107a";
        for (body, codec) in [(hex("789c03020000030001"), "zlib"), (hex("04224d1860408205000000106101000000000000"), "lz4"),
                              (hex("04224d186440a7050000001061010000000000004f98e8bb"), "lz4"), (hex(window), "zstd")] {
            assert!(inflate(&body, codec).is_none(), "{codec}");
        }
    }

    #[test]
    fn an_inflated_body_leaves_room_for_the_chunks_stored_ones() {
        let z = zlib_of(&[7u8; 4000]);
        let mut out = Vec::new();
        assert!(Inflater::new(&names(), i32::MAX as usize - 5000).unwrap().append(&z, 0x301, &mut out));
        assert!(!Inflater::new(&names(), i32::MAX as usize - 3000).unwrap().append(&z, 0x301, &mut out));
        assert_eq!(out.len(), 4000);
    }

    #[test]
    fn one_inflater_takes_body_after_body() {
        let mut inf = Inflater::new(&names(), 0).unwrap();
        let plain = b"abcabcabc".repeat(50);
        let zs = zstd::stream::encode_all(&plain[..], 3).unwrap();
        let mut out = Vec::new();
        for (body, flag) in [(&zlib_of(&plain)[..], 0x301), (b"garbage", 0x301), (&zs[..], 0x201), (&zlib_of(b"")[..], 0x001),
                             (&zs[..zs.len() - 2], 0x201), (&zs[..], 0x201)] {
            let before = out.len();
            let ok = inf.append(body, flag, &mut out);
            assert_eq!(ok, body != b"garbage" && body.len() != zs.len() - 2);
            assert!(!ok || out[before..] == plain[..] || (flag == 0x001 && out.len() == before));
        }
        assert_eq!(out.len(), 3 * plain.len());
    }
}
