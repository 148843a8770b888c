//! msglake's native codec core: the per-record steps of the segment codecs, compiled.
//!
//! The Python codecs in `formats/` stay the reference and keep their API; they call these
//! functions for their hot inner steps (framing walks, fixed fields, headers/properties,
//! CRC32, host and id formatting) and build the same Arrow columns from the buffers returned.
//! Every column comes back as a `bytes` object (fixed-width values in native order, or Arrow
//! int32 offsets + data) that Python wraps without a copy.

mod buffers;
mod digits;
mod hash;
mod nsq;
mod read;
mod rocketmq;
mod text;

use pyo3::prelude::*;
use pyo3::types::PyDict;

use buffers::{column, gather as gather_slices, I64s, View};

/// `buf[starts[i]:ends[i]]` concatenated: (int32 offsets, data), for an Arrow binary array.
#[pyfunction]
fn gather<'py>(py: Python<'py>, buf: &Bound<'py, PyAny>, starts: &Bound<'py, PyAny>, ends: &Bound<'py, PyAny>)
    -> PyResult<(Bound<'py, buffers::Buffer>, Bound<'py, buffers::Buffer>)> {
    let (buf, starts, ends) = (View::new(buf)?, I64s::new(starts)?, I64s::new(ends)?);
    let out = py.allow_threads(|| gather_slices(buf.bytes(), starts.values(), ends.values()));
    out.into_py(py)
}

/// NSQ: the records of `buf[start:end]`: (int64 positions, stop, kind, bad length prefix).
#[pyfunction]
fn nsq_frame<'py>(py: Python<'py>, buf: &Bound<'py, PyAny>, start: i64, end: i64)
    -> PyResult<(Bound<'py, buffers::Buffer>, i64, &'static str, i64)> {
    let view = View::new(buf)?;
    let fr = py.allow_threads(|| nsq::framing::frame(view.bytes(), start, end));
    Ok((column(py, fr.positions)?, fr.stop, fr.kind.name(), fr.bad))
}

/// NSQ: the walk without records: (stop, kind, boundaries about `every` bytes apart).
#[pyfunction]
#[pyo3(signature = (buf, start, end, every=None))]
fn nsq_walk(py: Python<'_>, buf: &Bound<'_, PyAny>, start: i64, end: i64, every: Option<i64>)
    -> PyResult<(i64, &'static str, Vec<i64>)> {
    let view = View::new(buf)?;
    let (stop, kind, cuts) = py.allow_threads(|| nsq::framing::walk(view.bytes(), start, end, every));
    Ok((stop, kind.name(), cuts))
}

/// NSQ: how far to read from `start` within a budget: (boundary, records).
#[pyfunction]
#[pyo3(signature = (buf, start, end, limit, max_bytes=None, max_records=None))]
fn nsq_advance(py: Python<'_>, buf: &Bound<'_, PyAny>, start: i64, end: i64, limit: i64, max_bytes: Option<i64>,
               max_records: Option<i64>) -> PyResult<(i64, i64)> {
    let view = View::new(buf)?;
    Ok(py.allow_threads(|| nsq::framing::advance(view.bytes(), start, end, limit, max_bytes, max_records)))
}

/// NSQ: fixed header and ext block of every record, as a dict of column buffers.
#[pyfunction]
fn nsq_fields<'py>(py: Python<'py>, buf: &Bound<'py, PyAny>, positions: &Bound<'py, PyAny>,
                   lengths: &Bound<'py, PyAny>) -> PyResult<Bound<'py, PyDict>> {
    let (view, positions, lengths) = (View::new(buf)?, I64s::new(positions)?, I64s::new(lengths)?);
    let f = py.allow_threads(|| nsq::fields::read(view.bytes(), positions.values(), lengths.values()));
    let d = PyDict::new(py);
    let ok: Vec<u8> = f.ok.iter().map(|&b| b as u8).collect();
    d.set_item("ok", column(py, ok)?)?;
    d.set_item("reasons", f.reasons)?;
    d.set_item("ts_ns", column(py, f.ts_ns)?)?;
    d.set_item("attempts", column(py, f.attempts)?)?;
    d.set_item("msg_id", column(py, f.msg_id)?)?;
    d.set_item("trace", column(py, f.trace)?)?;
    d.set_item("ver", column(py, f.ver)?)?;
    d.set_item("ext_start", column(py, f.ext_start)?)?;
    d.set_item("ext_end", column(py, f.ext_end)?)?;
    d.set_item("body_start", column(py, f.body_start)?)?;
    Ok(d)
}

/// NSQ: the pairs of simple JSON headers `buf[starts[i]:ends[i]]`, or None (see nsq::json).
#[pyfunction]
fn nsq_scan_headers<'py>(py: Python<'py>, buf: &Bound<'py, PyAny>, starts: &Bound<'py, PyAny>,
                         ends: &Bound<'py, PyAny>) -> PyResult<Option<Bound<'py, PyDict>>> {
    let (view, starts, ends) = (View::new(buf)?, I64s::new(starts)?, I64s::new(ends)?);
    let Some(p) = py.allow_threads(|| nsq::json::scan(view.bytes(), starts.values(), ends.values())) else {
        return Ok(None);
    };
    let d = PyDict::new(py);
    d.set_item("counts", column(py, p.counts)?)?;
    d.set_item("names", p.names)?;
    d.set_item("code", column(py, p.code)?)?;
    let is_int: Vec<u8> = p.is_int.iter().map(|&b| b as u8).collect();
    d.set_item("is_int", column(py, is_int)?)?;
    d.set_item("texts", p.texts.into_py(py)?)?;
    Ok(Some(d))
}

/// NSQ: frame `buf[start:end]` and, when every record is plain (`nsq::chunk`), decode it in
/// the same pass: (int64 positions, stop, kind, bad length prefix, columns or None). The
/// columns: `store_us`, `attempts`, `message_id`, `body` and the header columns of
/// `nsq_header_columns`. `columns`/`prefixes`: header names that are no user property.
#[pyfunction]
#[allow(clippy::type_complexity)]
fn nsq_chunk<'py>(py: Python<'py>, buf: &Bound<'py, PyAny>, start: i64, end: i64, columns: Vec<String>,
                  prefixes: Vec<String>)
    -> PyResult<(Bound<'py, buffers::Buffer>, i64, &'static str, i64, Option<Bound<'py, PyDict>>)> {
    let view = View::new(buf)?;
    let bytes = |words: Vec<String>| words.into_iter().map(String::into_bytes).collect();
    let users = nsq::chunk::UserProperties { columns: bytes(columns), prefixes: bytes(prefixes) };
    let c = py.allow_threads(|| nsq::chunk::decode(view.bytes(), start, end, &users));
    let fr = c.framing;
    let rows = match c.rows {
        None => None,
        Some(r) => {
            let d = nsq_columns_dict(py, r.headers)?;
            d.set_item("store_us", column(py, r.store_us)?)?;
            d.set_item("attempts", column(py, r.attempts)?)?;
            d.set_item("message_id", r.message_id.into_py(py)?)?;
            d.set_item("body", r.body.into_py(py)?)?;
            Some(d)
        }
    };
    Ok((column(py, fr.positions)?, fr.stop, fr.kind.name(), fr.bad, rows))
}

/// RocketMQ: the framing walk (`formats/rocketmq_commitlog.py::walk`):
/// (int64 positions, int64 lengths, stop, kind, why, need).
#[pyfunction]
#[allow(clippy::type_complexity)]
fn rmq_walk<'py>(py: Python<'py>, buf: &Bound<'py, PyAny>, start: i64, end: i64, hard_end: i64, phys_base: i64,
                 file_end: i64)
    -> PyResult<(Bound<'py, buffers::Buffer>, Bound<'py, buffers::Buffer>, i64, &'static str, String, i64)> {
    let view = View::new(buf)?;
    let fr = py.allow_threads(|| rocketmq::framing::walk(view.bytes(), start, end, hard_end, phys_base, file_end));
    Ok((column(py, fr.positions)?, column(py, fr.lengths)?, fr.stop, fr.kind.name(), fr.why, fr.need))
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
/// cache): (int64 positions, int64 lengths, stop, kind, why, need, columns). The columns: one
/// row per message of the records that pass every check; `reasons` lists (record index, why)
/// of the others.
#[pyfunction]
#[allow(clippy::too_many_arguments, clippy::type_complexity)]
fn rmq_chunk<'py>(py: Python<'py>, buf: &Bound<'py, PyAny>, start: i64, end: i64, hard_end: i64, phys_base: i64,
                  file_end: i64, verify_crc: bool, delay_levels: Vec<i64>, reserved: Vec<String>,
                  system_topics: Vec<String>, system_prefix: String)
    -> PyResult<(Bound<'py, buffers::Buffer>, Bound<'py, buffers::Buffer>, i64, &'static str, String, i64,
                 Bound<'py, PyDict>)> {
    let view = View::new(buf)?;
    let rules = rmq_rules(delay_levels, reserved, system_topics, system_prefix);
    let (fr, m) = py.allow_threads(|| {
        let bytes = view.bytes();
        let room = (end - start).max(0) as usize;
        let mut d = rocketmq::records::Decoder::new(bytes, verify_crc, &rules, room / 256, room);
        let fr = rocketmq::framing::walk_each(bytes, start, end, hard_end, phys_base, file_end,
                                              |i, p, size| d.record(i, p, size));
        (fr, d.finish())
    });
    let d = messages_dict(py, m)?;
    Ok((column(py, fr.positions)?, column(py, fr.lengths)?, fr.stop, fr.kind.name(), fr.why, fr.need, d))
}

/// The decoded RocketMQ messages as a dict of column buffers.
fn messages_dict(py: Python<'_>, m: rocketmq::records::Messages) -> PyResult<Bound<'_, PyDict>> {
    let d = PyDict::new(py);
    d.set_item("reasons", m.reasons)?;
    d.set_item("outer", column(py, m.outer)?)?;
    d.set_item("pos", column(py, m.pos)?)?;
    d.set_item("flag", column(py, m.flag)?)?;
    d.set_item("crc", column(py, m.crc)?)?;
    d.set_item("length", column(py, m.length)?)?;
    d.set_item("queue_id", column(py, m.queue_id)?)?;
    d.set_item("queue_offset", column(py, m.queue_offset)?)?;
    d.set_item("physical_offset", column(py, m.physical_offset)?)?;
    d.set_item("sysflag", column(py, m.sysflag)?)?;
    d.set_item("born_ms", column(py, m.born_ms)?)?;
    d.set_item("store_ms", column(py, m.store_ms)?)?;
    d.set_item("reconsume", column(py, m.reconsume)?)?;
    d.set_item("prepared", column(py, m.prepared)?)?;
    d.set_item("topic", m.topic.into_py(py)?)?;
    d.set_item("body", m.body.into_py(py)?)?;
    d.set_item("born_host", m.born_host.out.into_py(py)?)?;
    d.set_item("store_host", m.store_host.out.into_py(py)?)?;
    d.set_item("message_id", m.message_id.into_py(py)?)?;
    let p = m.props;
    d.set_item("prop_keys", p.keys.into_py(py)?)?;
    d.set_item("prop_values", p.values.into_py(py)?)?;
    d.set_item("uniq_first", p.uniq_first.into_py(py)?)?;
    let valid: Vec<u8> = p.uniq_first_valid.iter().map(|&b| b as u8).collect();
    d.set_item("uniq_first_valid", column(py, valid)?)?;
    derived_columns(py, &d, m.derived)?;
    Ok(d)
}

/// NSQ: the unified-schema columns of simple headers (`nsq_headers.header_columns`), for `n`
/// rows, header `i` on row `rows[i]`. `names`/`properties`: each name code's name and whether
/// it is a user property; `code`, `is_int`, `texts` (int32 offsets, data): each pair.
#[pyfunction]
#[allow(clippy::too_many_arguments)]
fn nsq_header_columns<'py>(py: Python<'py>, names: Vec<String>, properties: Vec<bool>, counts: &Bound<'py, PyAny>,
                           code: &Bound<'py, PyAny>, is_int: &Bound<'py, PyAny>, offsets: &Bound<'py, PyAny>,
                           data: &Bound<'py, PyAny>, rows: &Bound<'py, PyAny>, n: usize)
    -> PyResult<Bound<'py, PyDict>> {
    let (counts, code, rows) = (I64s::new(counts)?, I64s::new(code)?, I64s::new(rows)?);
    let (is_int, offsets, data) = (View::new(is_int)?, View::new(offsets)?, View::new(data)?);
    let pairs = nsq::headers::Pairs { names: &names, properties: &properties, counts: counts.values(),
                                      code: code.values(), is_int: is_int.bytes(), offsets: offsets.bytes(),
                                      data: data.bytes() };
    let c = py.allow_threads(|| pairs.columns(rows.values(), n));
    nsq_columns_dict(py, c)
}

/// The NSQ header columns into a dict: strings as (offsets, data, validity), int64 as (values, validity).
fn nsq_columns_dict(py: Python<'_>, c: nsq::headers::Columns) -> PyResult<Bound<'_, PyDict>> {
    let d = PyDict::new(py);
    let [born, start, expire] = c.times;
    let [born_host, search, txn, correlation] = c.texts;
    let [priority, durability, delay] = c.ints;
    for (name, col) in [("bornTimestamp", born), ("startDeliverTime", start), ("expireTime", expire),
                        ("priority", priority), ("durability", durability), ("delayTime", delay)] {
        d.set_item(name, (column(py, col.ints)?, column(py, bools(&col.valid))?))?;
    }
    for (name, col) in [("bornHost", born_host), ("searchKey", search), ("transactionId", txn),
                        ("correlationId", correlation), ("traceId", c.trace), ("messageKey", c.message_key),
                        ("tags", c.tags), ("compression", c.compression)] {
        let (off, data) = col.bin.into_py(py)?;
        d.set_item(name, (off, data, column(py, bools(&col.valid))?))?;
    }
    let (koff, kdata) = c.keys.into_py(py)?;
    d.set_item("keys", (column(py, c.keys_offsets)?, column(py, bools(&c.keys_valid))?, koff, kdata))?;
    d.set_item("headers", (column(py, c.header_offsets)?, c.header_keys.into_py(py)?, c.header_values.into_py(py)?))?;
    d.set_item("properties",
               (column(py, c.property_offsets)?, c.property_keys.into_py(py)?, c.property_values.into_py(py)?))?;
    Ok(d)
}

fn bools(v: &[bool]) -> Vec<u8> {
    v.iter().map(|&b| b as u8).collect()
}

/// The derived RocketMQ columns into `d`: strings as (offsets, data, validity), int64 as (values, validity).
fn derived_columns<'py>(py: Python<'py>, d: &Bound<'py, PyDict>, x: rocketmq::columns::Derived) -> PyResult<()> {
    for (name, col) in [("uniq", x.uniq), ("tags", x.tags), ("trace", x.trace), ("correlation", x.correlation),
                        ("sharding", x.sharding), ("transaction_id", x.transaction_id),
                        ("transaction_state", x.transaction_state), ("message_type", x.message_type)] {
        let (off, data) = col.bin.into_py(py)?;
        d.set_item(name, (off, data, column(py, bools(&col.valid))?))?;
    }
    for (name, col) in [("delay_ms", x.delay_ms), ("deliver_us", x.deliver_us), ("expire_us", x.expire_us)] {
        d.set_item(name, (column(py, col.values)?, column(py, bools(&col.valid))?))?;
    }
    let (koff, kdata) = x.keys.into_py(py)?;
    d.set_item("keys", (column(py, x.keys_offsets)?, column(py, bools(&x.keys_valid))?, koff, kdata))?;
    d.set_item("header_offsets", column(py, x.header_offsets)?)?;
    d.set_item("user_offsets", column(py, x.user_offsets)?)?;
    d.set_item("user_keys", x.user_keys.into_py(py)?)?;
    d.set_item("user_values", x.user_values.into_py(py)?)?;
    d.set_item("system_copy", column(py, bools(&x.system_copy))?)?;
    Ok(())
}

/// Bumped whenever a function's arguments or results change: `formats/native.py` uses the
/// module only when it names the same version, so a stale build never meets newer codecs.
const API_VERSION: u32 = 3;

#[pymodule]
fn msglake_native(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add("API_VERSION", API_VERSION)?;
    m.add_class::<buffers::Buffer>()?;
    m.add_function(wrap_pyfunction!(gather, m)?)?;
    m.add_function(wrap_pyfunction!(nsq_frame, m)?)?;
    m.add_function(wrap_pyfunction!(nsq_walk, m)?)?;
    m.add_function(wrap_pyfunction!(nsq_advance, m)?)?;
    m.add_function(wrap_pyfunction!(nsq_fields, m)?)?;
    m.add_function(wrap_pyfunction!(nsq_scan_headers, m)?)?;
    m.add_function(wrap_pyfunction!(nsq_header_columns, m)?)?;
    m.add_function(wrap_pyfunction!(nsq_chunk, m)?)?;
    m.add_function(wrap_pyfunction!(rmq_walk, m)?)?;
    m.add_function(wrap_pyfunction!(rmq_check_record, m)?)?;
    m.add_function(wrap_pyfunction!(rmq_chunk, m)?)?;
    Ok(())
}
