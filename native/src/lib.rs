//! msglake's native codec core: the per-record steps of the segment codecs, compiled.
//!
//! The Python codecs in `formats/` stay the reference and keep their API; they call these
//! functions for their hot inner steps (framing walks, fixed fields, headers/properties,
//! CRC32, host and id formatting). What a step makes comes back as Arrow arrays, through the
//! Arrow C Data Interface (`arrow::Batch`): the columns of the unified schema in their schema
//! types, and the numbers the Python steps go on with (positions, fixed fields).

/// The core's allocator (see Cargo.toml): every column buffer of a chunk, including those
/// pyarrow frees later through the C Data Interface's release callback, which calls back here.
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

mod arrow;
mod buffers;
mod digits;
mod hash;
mod keys;
mod names;
mod nsq;
mod read;
mod rocketmq;
mod text;

use arrow_array::types::{Int16Type, Int32Type, Int64Type, UInt64Type};
use arrow_schema::DataType;
use pyo3::prelude::*;

use arrow::{binary, flags, no_flags, numbers, optional, string_lists, string_maps, timestamps, utf8, Batch, BatchBuilder,
            Layout};
use buffers::{gather as gather_slices, Binary, I64s, View};

/// `buf[starts[i]:ends[i]]` for every i, as a batch of one binary column, `values`.
#[pyfunction]
fn gather<'py>(py: Python<'py>, buf: &Bound<'py, PyAny>, starts: &Bound<'py, PyAny>, ends: &Bound<'py, PyAny>)
    -> PyResult<Bound<'py, Batch>> {
    let (buf, starts, ends) = (View::new(buf)?, I64s::new(starts)?, I64s::new(ends)?);
    let out = py.allow_threads(|| gather_slices(buf.bytes(), starts.values(), ends.values()));
    let n = starts.values().len();
    let mut c = BatchBuilder::new();
    c.add("values", binary(out));
    c.finish(py, n)
}

/// Record positions (int64 column `positions`), with `lengths` when given.
fn positions(py: Python<'_>, at: Vec<i64>, lengths: Option<Vec<i64>>) -> PyResult<Bound<'_, Batch>> {
    let n = at.len();
    let mut c = BatchBuilder::new();
    c.add("positions", numbers::<Int64Type>(at));
    if let Some(lengths) = lengths {
        c.add("lengths", numbers::<Int64Type>(lengths));
    }
    c.finish(py, n)
}

/// NSQ: the records of `buf[start:end]`: (positions, stop, kind, bad length prefix).
#[pyfunction]
fn nsq_frame<'py>(py: Python<'py>, buf: &Bound<'py, PyAny>, start: i64, end: i64)
    -> PyResult<(Bound<'py, Batch>, i64, &'static str, i64)> {
    let view = View::new(buf)?;
    let fr = py.allow_threads(|| nsq::framing::frame(view.bytes(), start, end));
    Ok((positions(py, fr.positions, None)?, fr.stop, fr.kind.name(), fr.bad))
}

/// NSQ: fixed header and ext block of every record: (columns, [(record index, why)] of the
/// records that fail a check).
#[pyfunction]
fn nsq_fields<'py>(py: Python<'py>, buf: &Bound<'py, PyAny>, positions: &Bound<'py, PyAny>,
                   lengths: &Bound<'py, PyAny>) -> PyResult<(Bound<'py, Batch>, Vec<(usize, String)>)> {
    let (view, positions, lengths) = (View::new(buf)?, I64s::new(positions)?, I64s::new(lengths)?);
    let f = py.allow_threads(|| nsq::fields::read(view.bytes(), positions.values(), lengths.values()));
    let n = f.ok.len();
    let mut c = BatchBuilder::new();
    c.add("ok", flags(&f.ok))
        .add("ts_ns", numbers::<Int64Type>(f.ts_ns))
        .add("attempts", numbers::<Int32Type>(f.attempts))
        .add("msg_id", numbers::<UInt64Type>(f.msg_id))
        .add("trace", numbers::<UInt64Type>(f.trace))
        .add("ver", numbers::<Int16Type>(f.ver))
        .add("ext_start", numbers::<Int64Type>(f.ext_start))
        .add("ext_end", numbers::<Int64Type>(f.ext_end))
        .add("body_start", numbers::<Int64Type>(f.body_start));
    Ok((c.finish(py, n)?, f.reasons))
}

/// NSQ: the pairs of simple JSON headers `buf[starts[i]:ends[i]]`, or None (see nsq::json):
/// (pairs per record, header names, pairs: name `code`, `is_int`, `text`).
#[pyfunction]
#[allow(clippy::type_complexity)]
fn nsq_scan_headers<'py>(py: Python<'py>, buf: &Bound<'py, PyAny>, starts: &Bound<'py, PyAny>,
                         ends: &Bound<'py, PyAny>)
    -> PyResult<Option<(Bound<'py, Batch>, Vec<String>, Bound<'py, Batch>)>> {
    let (view, starts, ends) = (View::new(buf)?, I64s::new(starts)?, I64s::new(ends)?);
    let Some(p) = py.allow_threads(|| nsq::json::scan(view.bytes(), starts.values(), ends.values())) else {
        return Ok(None);
    };
    let (records, pairs) = (p.counts.len(), p.code.len());
    let mut counts = BatchBuilder::new();
    counts.add("counts", numbers::<Int64Type>(p.counts));
    let mut c = BatchBuilder::new();
    c.add("code", numbers::<Int64Type>(p.code)).add("is_int", flags(&p.is_int)).add("text", utf8(p.texts, None));
    Ok(Some((counts.finish(py, records)?, p.names, c.finish(py, pairs)?)))
}

/// Columns of one value on every row, as a step's caller names them: texts and int32 numbers,
/// null where None.
type Constants = (Vec<(String, Option<String>)>, Vec<(String, Option<i32>)>);

fn add_constants(c: &mut BatchBuilder, n: usize, (texts, ints): &Constants) {
    for (name, text) in texts {
        let column = match text {
            Some(text) => {
                let offsets = (0..=n).map(|i| (i * text.len()) as i32).collect();
                utf8(Binary { offsets, data: text.as_bytes().repeat(n) }, None)
            }
            None => arrow_array::new_null_array(&DataType::Utf8, n),
        };
        c.add(name, column);
    }
    for (name, value) in ints {
        c.add(name, match value {
            Some(value) => numbers::<Int32Type>(vec![*value; n]),
            None => arrow_array::new_null_array(&DataType::Int32, n),
        });
    }
}

/// Where a chunk's rows sit and what every row of it has: the chunk's file position, the
/// segment's first queue offset (None: unknown), the priority and durability of a record whose
/// headers give none, and the constant columns.
type ChunkRows = (i64, Option<i64>, (i32, i32), Constants);

/// NSQ: frame `buf[start:end]` and, when every record is plain (`nsq::chunk`), decode it in
/// the same pass: (positions, stop, kind, bad length prefix, rows or None). The rows: a source
/// batch, arranged as `layout` (`rows_at` says where they sit and gives the constant columns).
/// `columns`/`prefixes`: header names that are no user property.
#[pyfunction]
#[allow(clippy::type_complexity)]
fn nsq_chunk<'py>(py: Python<'py>, buf: &Bound<'py, PyAny>, start: i64, end: i64, columns: Vec<String>,
                  prefixes: Vec<String>, rows_at: ChunkRows, layout: PyRef<'py, Layout>)
    -> PyResult<(Bound<'py, Batch>, i64, &'static str, i64, Option<Bound<'py, Batch>>)> {
    let view = View::new(buf)?;
    let bytes = |words: Vec<String>| words.into_iter().map(String::into_bytes).collect();
    let users = nsq::chunk::UserProperties { columns: bytes(columns), prefixes: bytes(prefixes) };
    let c = py.allow_threads(|| nsq::chunk::decode(view.bytes(), start, end, &users));
    let fr = c.framing;
    let rows = match c.rows {
        None => None,
        Some(mut r) => {
            // Every framed record is a row (the pass makes none unless all are plain).
            let n = r.store_us.len();
            let (base, first_offset, (priority, durability), constants) = &rows_at;
            for (col, default) in r.headers.ints.iter_mut().zip([*priority, *durability]) {
                col.fill(default as i64);
            }
            let at: Vec<i64> = fr.positions.iter().map(|p| base + p).collect();
            let lengths: Vec<i64> = fr.positions.iter().zip(fr.positions.iter().skip(1).chain([&fr.stop]))
                .map(|(a, b)| b - a).collect();
            let offsets = first_offset.map(|first| at.iter().map(|p| p + first).collect::<Vec<_>>());
            let body_size = r.body.lengths();
            let mut cols = nsq_header_batch(r.headers);
            cols.add("segmentPosition", numbers::<Int64Type>(at))
                .add("queueOffset", match offsets {
                    Some(offsets) => numbers::<Int64Type>(offsets),
                    None => arrow_array::new_null_array(&DataType::Int64, n),
                })
                .add("recordLength", numbers::<Int64Type>(lengths))
                .add("storeTimestamp", timestamps(r.store_us, None))
                .add("deliveryCount", numbers::<Int32Type>(r.attempts))
                .add("messageId", utf8(r.message_id, None))
                .add("body", binary(r.body))
                .add("bodySize", numbers::<Int32Type>(body_size))
                .add("systemCopy", no_flags(n)); // NSQ keeps no internal copies
            add_constants(&mut cols, n, constants);
            Some(cols.finish_as(py, &layout, n)?)
        }
    };
    Ok((positions(py, fr.positions, None)?, fr.stop, fr.kind.name(), fr.bad, rows))
}

/// RocketMQ: the framing walk (`formats/rocketmq_commitlog.py::walk`):
/// (positions and lengths, stop, kind, why, need).
#[pyfunction]
#[allow(clippy::type_complexity)]
fn rmq_walk<'py>(py: Python<'py>, buf: &Bound<'py, PyAny>, start: i64, end: i64, hard_end: i64, phys_base: i64,
                 file_end: i64) -> PyResult<(Bound<'py, Batch>, i64, &'static str, String, i64)> {
    let view = View::new(buf)?;
    let fr = py.allow_threads(|| rocketmq::framing::walk(view.bytes(), start, end, hard_end, phys_base, file_end));
    Ok((positions(py, fr.positions, Some(fr.lengths))?, fr.stop, fr.kind.name(), fr.why, fr.need))
}

/// RocketMQ: why the record of TOTALSIZE `size` at `pos` cannot be one, or None.
#[pyfunction]
fn rmq_check_record(buf: &Bound<'_, PyAny>, pos: i64, size: i64, phys: i64) -> PyResult<Option<String>> {
    let view = View::new(buf)?;
    Ok(rocketmq::framing::check_record(view.bytes(), pos, size, phys))
}

/// The RocketMQ record rules of `rocketmq_layout`: `delay_levels` (ms per DELAY level),
/// `reserved` (property names that are not user properties), `system_topics`, `system_prefix`.
fn rmq_rules(delay_levels: Vec<i64>, reserved: Vec<String>, system_topics: Vec<String>, system_prefix: String)
    -> rocketmq::columns::Rules {
    let set = |words: Vec<String>| words.into_iter().map(String::into_bytes).collect();
    rocketmq::columns::Rules { delay_levels, reserved: set(reserved), system_topics: set(system_topics),
                               system_prefix: system_prefix.into_bytes() }
}

/// RocketMQ: `rmq_walk`, decoding each record as the walk reaches it (while its bytes are in
/// cache): (positions and lengths, records, stop, kind, why, need, rows, outer, bytes,
/// [(record index, why)]). The rows: one per message of the records that pass every check (see
/// `messages_batch`), arranged as `layout` (the source schema); outer: the record each row comes
/// from; bytes: their records' TOTALSIZEs summed (`recordLength` of the rows); the list names the
/// records that failed. `records` counts the positions, so the usual chunk, every record
/// decoded, needs neither small batch imported.
#[pyfunction]
#[allow(clippy::too_many_arguments, clippy::type_complexity)]
fn rmq_chunk<'py>(py: Python<'py>, buf: &Bound<'py, PyAny>, start: i64, end: i64, hard_end: i64, phys_base: i64,
                  file_end: i64, base: i64, constants: Constants, codec_names: Vec<String>, verify_crc: bool,
                  decompress: bool, delay_levels: Vec<i64>, reserved: Vec<String>, system_topics: Vec<String>, system_prefix: String,
                  layout: PyRef<'py, Layout>)
    -> PyResult<(Bound<'py, Batch>, usize, i64, &'static str, String, i64, Bound<'py, Batch>, Bound<'py, Batch>,
                 i64, Vec<(usize, String)>)> {
    if codec_names.len() != 8 {
        return Err(pyo3::exceptions::PyValueError::new_err("a compression name for each of the 8 COMPRESSIONTYPEs"));
    }
    let view = View::new(buf)?;
    let rules = rmq_rules(delay_levels, reserved, system_topics, system_prefix);
    let (fr, mut m) = py.allow_threads(|| {
        let bytes = view.bytes();
        let room = (end - start).max(0) as usize;
        let mut d = rocketmq::records::Decoder::new(bytes, verify_crc, &rules, room / 256, room);
        if decompress {
            d = d.inflating(&codec_names);
        }
        let fr = rocketmq::framing::walk_each(bytes, start, end, hard_end, phys_base, file_end,
                                              |i, p, size| d.record(i, p, size));
        (fr, d.finish())
    });
    let reasons = std::mem::take(&mut m.reasons);
    let n = m.outer.len();
    let records = fr.positions.len();
    let bytes = m.length.iter().sum();
    let mut outer = BatchBuilder::new();
    outer.add("outer", numbers::<Int64Type>(std::mem::take(&mut m.outer)));
    Ok((positions(py, fr.positions, Some(fr.lengths))?, records, fr.stop, fr.kind.name(), fr.why, fr.need,
        messages_batch(m, base, &constants, &codec_names).finish_as(py, &layout, n)?, outer.finish(py, n)?, bytes,
        reasons))
}

/// The decoded RocketMQ messages as the unified schema's columns, under their names and in
/// their types (`outer`, the record each row comes from, is taken out before). `base`: the
/// file position of the chunk, added to SEGMENTPOSITION; `constants`: the columns of one value; `codec_names`: the
/// compression's name for each COMPRESSIONTYPE (SYSFLAG bits 8-10), on the rows whose body is
/// compressed (with `decompress`, still compressed: left by `rocketmq::inflate`). Every row's
/// record passed the checks, so both times are within a Spark TIMESTAMP.
fn messages_batch(m: rocketmq::records::Messages, base: i64, constants: &Constants, codec_names: &[String])
    -> BatchBuilder {
    let n = m.pos.len();
    let compressed: Vec<bool> = if m.inflater.is_some() {
        let mut left = vec![false; n];
        m.left_compressed.iter().for_each(|&row| left[row] = true);
        left
    } else {
        m.sysflag.iter().map(|&f| f & rocketmq::layout::COMPRESSED_FLAG != 0).collect()
    };
    let mut compression = Binary::with_capacity(n, 0);
    for (&f, &on) in m.sysflag.iter().zip(&compressed) {
        compression.push(if on { codec_names[((f >> 8) & 7) as usize].as_bytes() } else { b"" });
    }
    let shift = |mut v: Vec<i64>, add: i64| {
        v.iter_mut().for_each(|x| *x += add);
        v
    };
    let micros = |mut v: Vec<i64>| {
        v.iter_mut().for_each(|x| *x *= 1000);
        v
    };
    let body_size = m.body.lengths();
    let mut c = BatchBuilder::new();
    for (name, values) in [("segmentPosition", shift(m.pos, base)), ("queueOffset", m.queue_offset),
                           ("physicalOffset", m.physical_offset), ("preparedTransactionOffset", m.prepared),
                           ("recordLength", m.length)] {
        c.add(name, numbers::<Int64Type>(values));
    }
    for (name, values) in [("partition", m.queue_id), ("deliveryCount", m.reconsume), ("flag", m.flag),
                           ("sysFlag", m.sysflag), ("bodyCrc", m.crc), ("bodySize", body_size)] {
        c.add(name, numbers::<Int32Type>(values));
    }
    c.add("bornTimestamp", timestamps(micros(m.born_ms), None))
        .add("storeTimestamp", timestamps(micros(m.store_ms), None))
        .add("compression", utf8(compression, Some(&compressed)));
    add_constants(&mut c, n, constants);
    let p = m.props;
    c.add("topic", utf8(m.topic, None))
        .add("body", binary(m.body))
        .add("bornHost", utf8(m.born_host.out, None))
        .add("storeHost", utf8(m.store_host.out, None))
        .add("messageId", utf8(m.message_id, None))
        .add("producerUniqueId", utf8(p.uniq_first, Some(&p.uniq_first_valid)));
    let x = m.derived;
    for (name, col) in [("uniqueId", x.uniq), ("traceId", x.trace), ("transactionId", x.transaction_id),
                        ("correlationId", x.correlation), ("messageKey", x.sharding), ("tags", x.tags),
                        ("messageType", x.message_type), ("transactionState", x.transaction_state)] {
        c.add(name, utf8(col.bin, Some(&col.valid)));
    }
    c.add("delayTime", optional::<Int64Type>(x.delay_ms.values, &x.delay_ms.valid))
        .add("startDeliverTime", timestamps(x.deliver_us.values, Some(&x.deliver_us.valid)))
        .add("expireTime", timestamps(x.expire_us.values, Some(&x.expire_us.valid)))
        .add("keys", string_lists(x.keys_offsets, &x.keys_valid, x.keys))
        .add("systemCopy", flags(&x.system_copy))
        .add("properties", string_maps(x.user_offsets, x.user_keys, x.user_values))
        .add("headers", string_maps(x.header_offsets, p.keys, p.values));
    c
}

/// NSQ: the unified-schema columns of simple headers (`nsq_headers.header_columns`), for `n`
/// rows, header `i` on row `rows[i]`. `names`/`properties`: each name code's name and whether
/// it is a user property; `code`, `is_int`, `texts` (int32 offsets, data): each pair.
#[pyfunction]
#[allow(clippy::too_many_arguments)]
fn nsq_header_columns<'py>(py: Python<'py>, names: Vec<String>, properties: Vec<bool>, counts: &Bound<'py, PyAny>,
                           code: &Bound<'py, PyAny>, is_int: &Bound<'py, PyAny>, offsets: &Bound<'py, PyAny>,
                           data: &Bound<'py, PyAny>, rows: &Bound<'py, PyAny>, n: usize)
    -> PyResult<Bound<'py, Batch>> {
    let (counts, code, rows) = (I64s::new(counts)?, I64s::new(code)?, I64s::new(rows)?);
    let (is_int, offsets, data) = (View::new(is_int)?, View::new(offsets)?, View::new(data)?);
    if !data.bytes().is_ascii() {
        // Simple JSON headers are printable ASCII; the columns made of them are not checked as UTF-8 again.
        return Err(pyo3::exceptions::PyValueError::new_err("header texts must be ASCII (simple JSON headers)"));
    }
    let pairs = nsq::headers::Pairs { names: &names, properties: &properties, counts: counts.values(),
                                      code: code.values(), is_int: is_int.bytes(), offsets: offsets.bytes(),
                                      data: data.bytes() };
    let c = py.allow_threads(|| pairs.columns(rows.values(), n));
    nsq_header_batch(c).finish(py, n)
}

/// The NSQ header columns under their schema names and types (priority and durability are
/// range-checked to int32 by the rules).
fn nsq_header_batch(c: nsq::headers::Columns) -> BatchBuilder {
    let mut out = BatchBuilder::new();
    let [born, start, expire] = c.times;
    let [born_host, search, txn, correlation] = c.texts;
    let [priority, durability, delay] = c.ints;
    for (name, col) in [("bornTimestamp", born), ("startDeliverTime", start), ("expireTime", expire)] {
        out.add(name, timestamps(col.ints, Some(&col.valid)));
    }
    for (name, col) in [("priority", priority), ("durability", durability)] {
        out.add(name, optional::<Int32Type>(col.ints.iter().map(|&v| v as i32).collect(), &col.valid));
    }
    out.add("delayTime", optional::<Int64Type>(delay.ints, &delay.valid));
    for (name, col) in [("bornHost", born_host), ("searchKey", search), ("transactionId", txn),
                        ("correlationId", correlation), ("traceId", c.trace), ("messageKey", c.message_key),
                        ("tags", c.tags), ("compression", c.compression)] {
        out.add(name, utf8(col.bin, Some(&col.valid)));
    }
    out.add("keys", string_lists(c.keys_offsets, &c.keys_valid, c.keys))
        .add("headers", string_maps(c.header_offsets, c.header_keys, c.header_values))
        .add("properties", string_maps(c.property_offsets, c.property_keys, c.property_values));
    out
}

/// Bumped whenever a function's arguments or results change: `formats/native.py` uses the
/// module only when it names the same version, so a stale build never meets newer codecs.
const API_VERSION: u32 = 12;

/// Producer-retry keys of a batch's rows (`keys`): columns `dedupKey` (the SHA-256 hex string
/// `transforms.dedup.dedup_key` makes in Spark) and `keyHash` (its `key_hash`), null where a row
/// has no key. `rows`: a pyarrow batch with the source schema's key columns.
#[pyfunction]
fn dedup_keys<'py>(py: Python<'py>, rows: &Bound<'py, PyAny>) -> PyResult<Bound<'py, Batch>> {
    use arrow_array::{Array, BinaryArray, BooleanArray, Int32Array, StringArray};

    let rows = arrow::import(rows)?;
    fn column<'a, T: 'static>(rows: &'a arrow_array::StructArray, name: &str) -> PyResult<&'a T> {
        rows.column_by_name(name).and_then(|c| c.as_any().downcast_ref::<T>()).ok_or_else(|| {
            pyo3::exceptions::PyValueError::new_err(format!("dedup_keys: no column {name} of the source schema's type"))
        })
    }
    let columns = keys::Columns {
        topic: column::<StringArray>(&rows, "topic")?,
        producer_unique_id: column::<StringArray>(&rows, "producerUniqueId")?,
        unique_id: column::<StringArray>(&rows, "uniqueId")?,
        delivery_count: column::<Int32Array>(&rows, "deliveryCount")?,
        trace_id: column::<StringArray>(&rows, "traceId")?,
        born_host: column::<StringArray>(&rows, "bornHost")?,
        body: column::<BinaryArray>(&rows, "body")?,
        system_copy: column::<BooleanArray>(&rows, "systemCopy")?,
    };
    let k = py.allow_threads(|| keys::keys(&columns));
    let n = rows.len();
    let mut c = BatchBuilder::new();
    c.add("dedupKey", utf8(k.text, Some(&k.valid))).add("keyHash", optional::<Int64Type>(k.hash, &k.valid));
    c.finish(py, n)
}

#[pymodule]
fn msglake_native(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add("API_VERSION", API_VERSION)?;
    m.add_class::<Batch>()?;
    m.add_class::<Layout>()?;
    m.add_function(wrap_pyfunction!(gather, m)?)?;
    m.add_function(wrap_pyfunction!(dedup_keys, m)?)?;
    m.add_function(wrap_pyfunction!(nsq_frame, m)?)?;
    m.add_function(wrap_pyfunction!(nsq_fields, m)?)?;
    m.add_function(wrap_pyfunction!(nsq_scan_headers, m)?)?;
    m.add_function(wrap_pyfunction!(nsq_header_columns, m)?)?;
    m.add_function(wrap_pyfunction!(nsq_chunk, m)?)?;
    m.add_function(wrap_pyfunction!(rmq_walk, m)?)?;
    m.add_function(wrap_pyfunction!(rmq_check_record, m)?)?;
    m.add_function(wrap_pyfunction!(rmq_chunk, m)?)?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use arrow_array::Array;

    fn rules() -> rocketmq::columns::Rules {
        rmq_rules(vec![1000], vec![], vec![], "rmq_sys_".into())
    }

    #[test]
    fn batches_of_no_rows_build() {
        let m = rocketmq::records::decode(&[], &[], &[], true, &rules());
        assert_eq!(messages_batch(m, 0, &(vec![("s".into(), None)], vec![("i".into(), Some(4))]), &[]).build(0).unwrap().len(), 0);
        assert_eq!(nsq_header_batch(nsq::headers::Columns::default()).build(0).unwrap().len(), 0);
    }

    #[test]
    fn a_rocketmq_row_is_placed_timed_labelled_and_named_compressed() {
        use arrow_array::cast::AsArray;
        use arrow_array::types::TimestampMicrosecondType;

        let mut rec = rocketmq::layout::tests::record(0, b"zipped", "t", b"");
        rec[36..40].copy_from_slice(&(rocketmq::layout::COMPRESSED_FLAG | 2 << 8).to_be_bytes()); // zstd
        let m = rocketmq::records::decode(&rec, &[0], &[rec.len() as i64], true, &rules());
        let names: Vec<String> = (0..8).map(|t| format!("codec{t}")).collect();
        let constants = (vec![("segment".into(), Some("00000000000000000000".into())), ("none".into(), None)],
                         vec![("priority".into(), Some(4)), ("nothing".into(), None)]);
        let b = messages_batch(m, 1_000, &constants, &names).build(1).unwrap();
        let column = |name: &str| b.column_by_name(name).unwrap_or_else(|| panic!("no {name}")).clone();
        assert_eq!(column("segmentPosition").as_primitive::<Int64Type>().value(0), 1_000);
        let born = rocketmq::records::decode(&rec, &[0], &[rec.len() as i64], true, &rules()).born_ms[0];
        assert_eq!(column("bornTimestamp").as_primitive::<TimestampMicrosecondType>().value(0), born * 1000);
        assert_eq!(column("bodySize").as_primitive::<Int32Type>().value(0), 6);
        assert_eq!(column("compression").as_string::<i32>().value(0), "codec2");
        assert_eq!(column("segment").as_string::<i32>().value(0), "00000000000000000000");
        assert_eq!(column("priority").as_primitive::<Int32Type>().value(0), 4);
        assert!(column("none").is_null(0) && column("nothing").is_null(0));
    }
}
