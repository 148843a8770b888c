//! Byte views of Python buffers in; the growing column vectors the decoders fill.
//!
//! Inputs are any C-contiguous buffer (bytes, mmap, a NumPy array) read in place. What the
//! decoders fill leaves as Arrow arrays (`crate::arrow`).

use pyo3::buffer::PyBuffer;
use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;

use crate::read::{prefetch, AHEAD};

/// A read-only view of a Python buffer, held for the duration of one call.
pub struct View {
    buf: PyBuffer<u8>,
}

impl View {
    pub fn new(obj: &Bound<'_, PyAny>) -> PyResult<Self> {
        let buf = PyBuffer::<u8>::get(obj)?;
        if !buf.is_c_contiguous() {
            return Err(PyValueError::new_err("buffer must be C-contiguous"));
        }
        Ok(View { buf })
    }

    pub fn bytes(&self) -> &[u8] {
        // SAFETY: the buffer is C-contiguous, of len_bytes bytes, and kept alive (and its
        // exporter locked against resizing) by `self.buf` for as long as the slice lives.
        unsafe { std::slice::from_raw_parts(self.buf.buf_ptr() as *const u8, self.buf.len_bytes()) }
    }
}

/// An int64 array given by Python (NumPy), read in place.
pub struct I64s {
    buf: PyBuffer<i64>,
}

impl I64s {
    pub fn new(obj: &Bound<'_, PyAny>) -> PyResult<Self> {
        let buf = PyBuffer::<i64>::get(obj)?;
        if !buf.is_c_contiguous() {
            return Err(PyValueError::new_err("int64 array must be C-contiguous"));
        }
        Ok(I64s { buf })
    }

    pub fn values(&self) -> &[i64] {
        // SAFETY: as for View; the element type was checked by PyBuffer::get.
        unsafe { std::slice::from_raw_parts(self.buf.buf_ptr() as *const i64, self.buf.item_count()) }
    }
}

/// Variable-length values (binary or UTF-8) as Arrow's int32 offsets and one data buffer.
#[derive(Default, Debug)]
pub struct Binary {
    pub offsets: Vec<i32>,
    pub data: Vec<u8>,
}

impl Binary {
    pub fn with_capacity(items: usize, bytes: usize) -> Self {
        let mut offsets = Vec::with_capacity(items + 1);
        offsets.push(0);
        Binary { offsets, data: Vec::with_capacity(bytes) }
    }

    /// The length of each value (a binary column's sizes, as Arrow's int32).
    pub fn lengths(&self) -> Vec<i32> {
        self.offsets.windows(2).map(|w| w[1] - w[0]).collect()
    }

    #[inline(always)]
    pub fn push(&mut self, value: &[u8]) {
        append(&mut self.data, value);
        self.offsets.push(self.data.len() as i32);
    }
}

/// `out.extend_from_slice(value)`, with values of up to 32 bytes copied inline: a record
/// appends some twenty short values (names, values, ids, hosts), and a library call per value
/// (memcpy) costs more than the copy itself.
#[inline(always)]
pub fn append(out: &mut Vec<u8>, value: &[u8]) {
    let n = value.len();
    if n > 32 {
        out.extend_from_slice(value);
        return;
    }
    out.reserve(n);
    // SAFETY: `reserve` made room for n more bytes after len; every read below lies inside
    // `value` (the two pieces of each size class overlap rather than read past its end), every
    // write inside that room, and the bytes from len to len + n are all written before set_len.
    unsafe {
        let (src, dst) = (value.as_ptr(), out.as_mut_ptr().add(out.len()));
        use std::ptr::{read_unaligned as rd, write_unaligned as wr};
        if n >= 16 {
            wr(dst as *mut u128, rd(src as *const u128));
            wr(dst.add(n - 16) as *mut u128, rd(src.add(n - 16) as *const u128));
        } else if n >= 8 {
            wr(dst as *mut u64, rd(src as *const u64));
            wr(dst.add(n - 8) as *mut u64, rd(src.add(n - 8) as *const u64));
        } else if n >= 4 {
            wr(dst as *mut u32, rd(src as *const u32));
            wr(dst.add(n - 4) as *mut u32, rd(src.add(n - 4) as *const u32));
        } else if n > 0 {
            *dst = *src;
            *dst.add(n / 2) = *src.add(n / 2);
            *dst.add(n - 1) = *src.add(n - 1);
        }
        out.set_len(out.len() + n);
    }
}

/// `buf[starts[i]..ends[i]]` for every i, concatenated: the one copy a binary column needs.
pub fn gather(buf: &[u8], starts: &[i64], ends: &[i64]) -> Binary {
    let total: i64 = starts.iter().zip(ends).map(|(a, b)| b - a).sum();
    let mut out = Binary::with_capacity(starts.len(), total.max(0) as usize);
    for (i, (&a, &b)) in starts.iter().zip(ends).enumerate() {
        if let Some(&ahead) = starts.get(i + AHEAD) {
            prefetch(buf, ahead);
        }
        out.push(&buf[a as usize..b as usize]);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn append_copies_every_length() {
        let src: Vec<u8> = (0..80u8).collect();
        for a in 0..8 {
            for n in 0..=70 {
                let mut out = vec![0xee; a];
                append(&mut out, &src[a..a + n]);
                assert_eq!(&out[a..], &src[a..a + n], "offset {a}, length {n}");
                assert_eq!(out.len(), a + n);
            }
        }
    }

    #[test]
    fn gather_concatenates_slices_with_offsets() {
        let g = gather(b"0123456789abcdef", &[1, 5, 5, 10], &[3, 5, 8, 16]);
        assert_eq!(g.offsets, vec![0, 2, 2, 5, 11]);
        assert_eq!(g.data, b"12567abcdef");
    }
}
