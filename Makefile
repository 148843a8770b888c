# The two commands of the README: `make demo` and `make test`. Each one sets up what it
# needs on a fresh machine first (virtualenv, editable install, Delta jars), once.
PYTHON ?= python3.11
VENV   := .venv
BIN    := $(VENV)/bin
JARS   := .jars
# Groups pyspark already ships in pyspark/jars: keep one copy of each on the classpath.
JAR_EXCLUDES := org.scala-lang,org.apache.hadoop,com.fasterxml.jackson.core,com.fasterxml.jackson.datatype,org.apache.parquet,org.roaringbitmap,io.airlift,org.apache.logging.log4j,org.slf4j,commons-logging,commons-pool,org.locationtech.jts,com.google.code.findbugs,org.xerial.snappy,com.github.luben,javax.annotation

.PHONY: setup demo test test-fast bench clean-demo help
.DEFAULT_GOAL := help

help:
	@echo "make demo   - generate sample NSQ segments, ingest them into a local Delta lake, show the result"
	@echo "make test   - run the test suite (what CI runs)"
	@echo "make test-fast - the quick lane for development: no Spark jobs end to end, subprocesses or notebooks"
	@echo "make bench  - run the ingest and streaming benchmarks (see benchmarks/)"
	@echo "make setup  - only create .venv, install msglake and fetch the Delta jars"

$(BIN)/.installed: pyproject.toml
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	$(BIN)/pip install --quiet -e '.[dev]'
	touch $@

$(JARS)/.complete: jars/pom.xml
	@command -v mvn >/dev/null || { echo "Maven (mvn) is needed once to fetch the Delta jars from Maven Central"; exit 1; }
	rm -rf $(JARS) && mkdir -p $(JARS)
	mvn --quiet --batch-mode -f jars/pom.xml dependency:copy-dependencies \
	    -DincludeScope=runtime -DexcludeGroupIds=$(JAR_EXCLUDES) -DoutputDirectory=$(abspath $(JARS))
	touch $@

setup: $(BIN)/.installed $(JARS)/.complete

demo: setup
	$(BIN)/msglake demo

test: setup
	$(BIN)/python -m pytest

test-fast: setup
	$(BIN)/python -m pytest -m "not slow"

bench: setup
	$(BIN)/python benchmarks/suite.py
	$(BIN)/python benchmarks/bench_ingest.py --format nsq-ext
	$(BIN)/python benchmarks/bench_ingest.py --format rocketmq-commitlog
	$(BIN)/python benchmarks/bench_stream.py
	$(BIN)/python benchmarks/bench_replay.py
	$(BIN)/python benchmarks/bench_trace.py
	$(BIN)/python benchmarks/bench_sql.py
	$(BIN)/python benchmarks/bench_small_segments.py

clean-demo:
	rm -rf lake demo-data
