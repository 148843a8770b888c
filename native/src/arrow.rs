//! Columns out: Arrow arrays over the vectors the decoders filled (moved, not copied), handed
//! to pyarrow through the Arrow C Data Interface.
//!
//! A step's columns become one [`Batch`] (a struct array of named columns). It implements the
//! Arrow PyCapsule protocol (`__arrow_c_array__`): `pa.record_batch(batch)` imports it where it
//! lies, and the Rust buffers live until the last pyarrow array over them is gone.

use std::ffi::CString;
use std::sync::{Arc, Mutex};

use arrow_array::ffi::{from_ffi, FFI_ArrowArray, FFI_ArrowSchema};
use arrow_array::types::{ArrowPrimitiveType, TimestampMicrosecondType};
use arrow_array::{new_null_array, Array, ArrayRef, BinaryArray, BooleanArray, ListArray, MapArray, PrimitiveArray,
                  StringArray, StructArray};
use arrow_buffer::{BooleanBuffer, Buffer, NullBuffer, OffsetBuffer, ScalarBuffer};
use arrow_schema::{DataType, Field, Fields, Schema};
use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;
use pyo3::types::PyCapsule;

use crate::buffers::Binary;

/// Named columns of one length, becoming one [`Batch`].
#[derive(Default)]
pub struct BatchBuilder {
    fields: Vec<Field>,
    arrays: Vec<ArrayRef>,
}

impl BatchBuilder {
    pub fn new() -> Self {
        Self::default()
    }

    pub fn add(&mut self, name: &str, array: ArrayRef) -> &mut Self {
        self.fields.push(Field::new(name, array.data_type().clone(), true));
        self.arrays.push(array);
        self
    }

    /// The columns as one struct array of `len` rows (what a batch of no columns has).
    pub fn build(self, len: usize) -> Result<StructArray, String> {
        StructArray::try_new_with_length(Fields::from(self.fields), self.arrays, None, len)
            .map_err(|e| format!("columns of unequal length: {e}"))
    }

    /// The batch for Python.
    pub fn finish(self, py: Python<'_>, len: usize) -> PyResult<Bound<'_, Batch>> {
        let array = self.build(len).map_err(PyValueError::new_err)?;
        Bound::new(py, Batch::new(array))
    }

    /// The batch for Python with the fields of `layout`, in its order: a field no column was
    /// added for is all null. A column the layout has no field for, or of another type than
    /// its field, is an error (a misnamed column must not pass as a null one).
    pub fn finish_as<'py>(self, py: Python<'py>, layout: &Layout, len: usize) -> PyResult<Bound<'py, Batch>> {
        let mut made: Vec<Option<ArrayRef>> = self.arrays.into_iter().map(Some).collect();
        let mut arrays = Vec::with_capacity(layout.fields.len());
        for field in layout.fields.iter() {
            let at = self.fields.iter().position(|f| f.name() == field.name());
            let array = at.and_then(|at| made[at].take()).unwrap_or_else(|| new_null_array(field.data_type(), len));
            if array.data_type() != field.data_type() {
                return Err(PyValueError::new_err(format!("column {} is {}, the layout's field is {}", field.name(),
                                                         array.data_type(), field.data_type())));
            }
            arrays.push(array);
        }
        if let Some(at) = made.iter().position(Option::is_some) {
            return Err(PyValueError::new_err(format!("column {} is not in the layout", self.fields[at].name())));
        }
        let array = StructArray::try_new_with_length(layout.fields.clone(), arrays, None, len)
            .map_err(|e| PyValueError::new_err(format!("columns do not fit the layout: {e}")))?;
        Bound::new(py, Batch::new(array))
    }
}

/// The fields a step's batch is arranged in (`BatchBuilder::finish_as`), from a pyarrow schema
/// given once: the batch then imports with that schema object (`Batch::array_address`), with no
/// schema crossing for each batch and no Python step to order, add or cast columns.
#[pyclass(frozen, module = "msglake_native")]
pub struct Layout {
    fields: Fields,
}

#[pymethods]
impl Layout {
    /// `schema`: any object with `__arrow_c_schema__` (a `pyarrow.Schema`).
    #[new]
    fn new(schema: &Bound<'_, PyAny>) -> PyResult<Self> {
        let capsule = schema.call_method0("__arrow_c_schema__")?;
        let capsule = capsule.downcast::<PyCapsule>()?;
        // SAFETY: `__arrow_c_schema__` returns a capsule holding an ArrowSchema struct, alive as
        // long as the capsule; it is only read here.
        let ffi = unsafe { &*(capsule.pointer() as *const FFI_ArrowSchema) };
        let schema = Schema::try_from(ffi).map_err(|e| PyValueError::new_err(format!("not an Arrow schema: {e}")))?;
        Ok(Layout { fields: schema.fields().clone() })
    }
}

/// Columns in: any object with `__arrow_c_array__` (a `pyarrow.RecordBatch`) as one struct
/// array, its buffers read where pyarrow keeps them (released when the array drops).
pub fn import(rows: &Bound<'_, PyAny>) -> PyResult<StructArray> {
    let (schema, array): (Bound<'_, PyCapsule>, Bound<'_, PyCapsule>) = rows.call_method0("__arrow_c_array__")?.extract()?;
    // SAFETY: the protocol's capsules hold an ArrowSchema and an ArrowArray; the array is moved
    // out (its release callback becomes ours, the capsule's struct is left released), the
    // schema only read while its capsule lives.
    let data = unsafe {
        let array = FFI_ArrowArray::from_raw(array.pointer() as *mut FFI_ArrowArray);
        from_ffi(array, &*(schema.pointer() as *const FFI_ArrowSchema))
    }.map_err(|e| PyValueError::new_err(format!("not an Arrow array: {e}")))?;
    match data.data_type() {
        DataType::Struct(_) => Ok(StructArray::from(data)),
        other => Err(PyValueError::new_err(format!("expected a batch of columns, got {other}"))),
    }
}

/// Decoded columns lent to pyarrow through the Arrow C Data Interface.
#[pyclass(frozen, module = "msglake_native")]
pub struct Batch {
    array: StructArray,
    /// ArrowArray structs handed out by address, freed with the batch (pyarrow moves out what
    /// they hold and marks them released). Boxed: an address handed out stays put when the
    /// vector grows.
    #[allow(clippy::vec_box)]
    exported: Mutex<Vec<Box<FFI_ArrowArray>>>,
}

impl Batch {
    fn new(array: StructArray) -> Self {
        Batch { array, exported: Mutex::new(Vec::new()) }
    }
}

#[pymethods]
impl Batch {
    /// The address of an ArrowArray of the batch's struct array, for
    /// `pa.RecordBatch._import_from_c(address, schema)` with the schema the caller already has
    /// (its `Layout`'s): no schema is exported. Valid while the batch lives.
    fn array_address(&self) -> usize {
        let array = Box::new(FFI_ArrowArray::new(&self.array.to_data()));
        let address = &*array as *const FFI_ArrowArray as usize;
        self.exported.lock().expect("no panic while exporting").push(array);
        address
    }

    /// The Arrow PyCapsule protocol: (schema capsule, array capsule) of the struct array. A
    /// requested schema is not applied here: the batch has one layout, the caller casts.
    #[pyo3(signature = (requested_schema=None))]
    fn __arrow_c_array__<'py>(&self, py: Python<'py>, requested_schema: Option<Bound<'py, PyAny>>)
        -> PyResult<(Bound<'py, PyCapsule>, Bound<'py, PyCapsule>)> {
        let _ = requested_schema;
        let data = self.array.to_data();
        let schema = FFI_ArrowSchema::try_from(data.data_type())
            .map_err(|e| PyValueError::new_err(format!("no Arrow C schema for the batch: {e}")))?;
        // A capsule pyarrow has not imported from releases its struct when it is dropped (the
        // structs' Drop); an imported one was moved out, its release set to null.
        let name = |s: &str| CString::new(s).expect("no NUL in a capsule name");
        Ok((PyCapsule::new(py, schema, Some(name("arrow_schema")))?,
            PyCapsule::new(py, FFI_ArrowArray::new(&data), Some(name("arrow_array")))?))
    }

    fn __len__(&self) -> usize {
        self.array.len()
    }
}

/// `values` as Arrow's bits (value `i` is bit `i % 8` of byte `i / 8`), with how many are set.
/// Eight at a time: a multiply gathers the low bit of each of eight bytes into the top byte,
/// where BooleanBuffer::from(&[bool]) sets the bits one by one (3 % of an NSQ decode, whose
/// batches carry some fifteen validity columns).
fn pack(values: &[bool]) -> (BooleanBuffer, usize) {
    // SAFETY: a bool is one byte, 0 or 1.
    let bytes = unsafe { std::slice::from_raw_parts(values.as_ptr() as *const u8, values.len()) };
    let mut bits = Vec::with_capacity(bytes.len().div_ceil(8));
    let mut words = bytes.chunks_exact(8);
    for w in &mut words {
        // Byte k of the product's top byte collects input byte k alone: every (input byte i,
        // multiplier byte j) pair lands on its own bit, so no two terms carry into each other.
        bits.push((u64::from_le_bytes(w.try_into().unwrap()).wrapping_mul(0x0102_0408_1020_4080) >> 56) as u8);
    }
    let tail = words.remainder();
    if !tail.is_empty() {
        bits.push(tail.iter().enumerate().fold(0u8, |b, (k, &v)| b | (v << k)));
    }
    let set = bits.iter().map(|b| b.count_ones() as usize).sum();
    (BooleanBuffer::new(Buffer::from_vec(bits), 0, values.len()), set)
}

/// Validity of `valid`; None when every value is valid.
fn nulls(valid: &[bool]) -> Option<NullBuffer> {
    let (bits, set) = pack(valid);
    // SAFETY: `set` is the count of set bits of `bits`, so the null count is the rest.
    (set < valid.len()).then(|| unsafe { NullBuffer::new_unchecked(bits, valid.len() - set) })
}

/// Numbers, all valid.
pub fn numbers<T: ArrowPrimitiveType>(values: Vec<T::Native>) -> ArrayRef {
    Arc::new(PrimitiveArray::<T>::new(ScalarBuffer::from(values), None))
}

/// Numbers, null where `valid` is false.
pub fn optional<T: ArrowPrimitiveType>(values: Vec<T::Native>, valid: &[bool]) -> ArrayRef {
    Arc::new(PrimitiveArray::<T>::new(ScalarBuffer::from(values), nulls(valid)))
}

/// Microseconds since the epoch as `timestamp[us, tz=UTC]` (the schema's TS), null where
/// `valid` (when given) is false.
pub fn timestamps(values: Vec<i64>, valid: Option<&[bool]>) -> ArrayRef {
    Arc::new(PrimitiveArray::<TimestampMicrosecondType>::new(ScalarBuffer::from(values), valid.and_then(nulls))
        .with_timezone("UTC"))
}

pub fn flags(values: &[bool]) -> ArrayRef {
    Arc::new(BooleanArray::new(pack(values).0, None))
}

/// `n` false flags.
pub fn no_flags(n: usize) -> ArrayRef {
    Arc::new(BooleanArray::new(BooleanBuffer::new_unset(n), None))
}

/// Arrow offsets of `offsets`, which index `len` bytes or entries; none yet (a column no row
/// was pushed to) is the one offset 0.
fn offsets(offsets: Vec<i32>, len: usize) -> OffsetBuffer<i32> {
    // Each offset is the length its data or entries had when it was pushed, cast to i32, and
    // that length only grows: at most i32::MAX at the end, every cast was exact, so the offsets
    // start at 0 and never decrease. Past it a cast wrapped; that fails here, as
    // OffsetBuffer::new's full check (a pass over each of a batch's some twenty offsets
    // vectors, 2 % of an NSQ decode) failed before.
    assert!(len <= i32::MAX as usize, "a column of more than 2 GiB (or 2^31 entries) does not fit Arrow's int32 offsets");
    let Some(&last) = offsets.last() else {
        return OffsetBuffer::new_empty();
    };
    assert!(last >= 0 && last as usize <= len, "offsets past the end of their values");
    debug_assert!(offsets[0] >= 0 && offsets.windows(2).all(|w| w[0] <= w[1]));
    // SAFETY: non-negative and non-decreasing, as said above.
    unsafe { OffsetBuffer::new_unchecked(ScalarBuffer::from(offsets)) }
}

fn parts(b: Binary) -> (OffsetBuffer<i32>, Buffer) {
    let len = b.data.len();
    (offsets(b.offsets, len), Buffer::from_vec(b.data))
}

pub fn binary(b: Binary) -> ArrayRef {
    let (off, data) = parts(b);
    Arc::new(BinaryArray::new(off, data, None))
}

/// Strings, null where `valid` (when given) is false.
pub fn utf8(b: Binary, valid: Option<&[bool]>) -> ArrayRef {
    let (off, data) = parts(b);
    // The unchecked constructor does not compare the validity with the rows either.
    assert!(valid.is_none_or(|v| v.len() == off.len() - 1), "a validity for every string");
    // SAFETY: the offsets are non-negative, non-decreasing and within `data` (`offsets`). The
    // values are UTF-8: every text column is made of bytes the
    // decoders checked as UTF-8 (RocketMQ topics and property strings, cut only at ASCII
    // separators; NSQ version-2 tags), of ASCII they wrote (ids, hosts, numbers), of simple
    // JSON strings, which are printable ASCII (`nsq::json`; pairs Python hands to
    // `nsq_header_columns` are checked to be ASCII there) or of Rust `String`s Python passed
    // (constant columns, compression names: pyo3 made them from `str`s), so they are not
    // validated again.
    Arc::new(unsafe { StringArray::new_unchecked(off, data, valid.and_then(nulls)) })
}

/// `list<string>` (Arrow's `item` field): list `i` is values `offsets[i]..offsets[i + 1]`.
pub fn string_lists(list_offsets: Vec<i32>, valid: &[bool], values: Binary) -> ArrayRef {
    let item = Arc::new(Field::new("item", DataType::Utf8, true));
    let entries = values.offsets.len().saturating_sub(1);
    Arc::new(ListArray::new(item, offsets(list_offsets, entries), utf8(values, None), nulls(valid)))
}

/// `map<string, string>` as pyarrow names it (`entries` of `key` and `value`): map `i` is
/// pairs `offsets[i]..offsets[i + 1]`.
pub fn string_maps(map_offsets: Vec<i32>, keys: Binary, values: Binary) -> ArrayRef {
    let fields = Fields::from(vec![Field::new("key", DataType::Utf8, false), Field::new("value", DataType::Utf8, true)]);
    let n = keys.offsets.len().saturating_sub(1);
    let entries = StructArray::new(fields.clone(), vec![utf8(keys, None), utf8(values, None)], None);
    let field = Arc::new(Field::new("entries", DataType::Struct(fields), false));
    Arc::new(MapArray::new(field, offsets(map_offsets, n), entries, None, false))
}

#[cfg(test)]
mod tests {
    use super::*;
    use arrow_array::cast::AsArray;
    use arrow_array::types::Int64Type;

    fn text(values: &[&str]) -> Binary {
        let mut b = Binary::with_capacity(values.len(), 0);
        values.iter().for_each(|v| b.push(v.as_bytes()));
        b
    }

    #[test]
    fn validity_only_when_something_is_null() {
        assert!(optional::<Int64Type>(vec![1, 2], &[true, true]).nulls().is_none());
        let a = optional::<Int64Type>(vec![1, 0], &[true, false]);
        assert_eq!(a.null_count(), 1);
        assert!(a.is_null(1));
    }

    #[test]
    fn packed_flags_are_the_standard_librarys_bits() {
        for n in [0usize, 1, 7, 8, 9, 63, 64, 65, 130] {
            for pattern in [0u64, u64::MAX, 0x5555_5555_5555_5555, 0x8421_1248_8421_1248, 0xDEAD_BEEF_0123_4567] {
                let values: Vec<bool> = (0..n).map(|i| pattern >> (i % 64) & 1 == 1 || (i % 7 == 3 && pattern != 0)).collect();
                let (bits, set) = pack(&values);
                assert_eq!(bits, BooleanBuffer::from(values.as_slice()), "{n} {pattern:x}");
                assert_eq!(set, values.iter().filter(|&&v| v).count());
                let nulls = nulls(&values);
                assert_eq!(nulls.as_ref().map_or(0, |b| b.null_count()), n - set);
                assert_eq!(nulls.is_none(), set == n);
            }
        }
        assert_eq!(no_flags(3).as_boolean().true_count(), 0);
    }

    #[test]
    fn strings_lists_and_maps_keep_their_offsets() {
        let s = utf8(text(&["a", "", "bc"]), Some(&[true, false, true]));
        let s = s.as_string::<i32>();
        assert_eq!((s.value(0), s.is_null(1), s.value(2)), ("a", true, "bc"));
        let l = string_lists(vec![0, 2, 2, 3], &[true, false, true], text(&["x", "y", "z"]));
        assert_eq!(l.as_list::<i32>().value_offsets(), &[0, 2, 2, 3]);
        let m = string_maps(vec![0, 1, 1], text(&["k"]), text(&["v"]));
        assert_eq!(m.as_map().value_offsets(), &[0, 1, 1]);
        assert_eq!(binary(Binary::default()).len(), 0);
    }

    #[test]
    #[should_panic(expected = "offsets past the end")]
    fn offsets_past_their_values_are_refused() {
        binary(Binary { offsets: vec![0, 3], data: b"ab".to_vec() });
    }

    #[test]
    fn zero_rows_and_all_nulls_build() {
        let mut b = BatchBuilder::new();
        b.add("s", utf8(Binary::default(), Some(&[])))
            .add("l", string_lists(vec![], &[], Binary::default()))
            .add("m", string_maps(vec![], Binary::default(), Binary::default()));
        assert_eq!(b.build(0).unwrap().len(), 0);
        let none = utf8(text(&["", ""]), Some(&[false, false]));
        assert_eq!(none.null_count(), 2);
        let mut c = BatchBuilder::new();
        c.add("a", none);
        assert!(c.build(3).is_err(), "two rows are not three");
    }
}
