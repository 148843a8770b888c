"""Segment codecs: broker segment bytes -> Arrow record batches in the unified schema.

Pure Python/NumPy/Arrow, no Spark. One module per broker format; a codec is looked up by
its format name (``nsq-ext``) with :func:`msglake.formats.registry.get_codec`.
"""
