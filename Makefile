# The two commands of the README: `make demo` and `make test`. Each one sets up what it
# needs on a fresh machine first (virtualenv, editable install, Delta jars), once.
PYTHON ?= python3.11
VENV   := .venv
BIN    := $(VENV)/bin
JARS   := .jars
# Groups pyspark already ships in pyspark/jars: keep one copy of each on the classpath.
JAR_EXCLUDES := org.scala-lang,org.apache.hadoop,com.fasterxml.jackson.core,com.fasterxml.jackson.datatype,org.apache.parquet,org.roaringbitmap,io.airlift,org.apache.logging.log4j,org.slf4j,commons-logging,commons-pool,org.locationtech.jts,com.google.code.findbugs,org.xerial.snappy,com.github.luben,javax.annotation

.PHONY: setup demo test test-fast test-native test-python-path bench clean-demo help
# Two set-up steps at a time (e.g. the Delta jars fetched while pip installs, the local file system
# jar compiled while cargo builds the native core): the prerequisites below say what waits for what.
# (cargo is started without make's MAKEFLAGS: it would look for make's job slots, which a recipe
# does not hand down, and warn.)
MAKEFLAGS += --jobs=2
.DEFAULT_GOAL := help

help:
	@echo "make demo   - generate sample NSQ segments, ingest them into a local Delta lake, show the result"
	@echo "make test   - run the test suite (what CI runs)"
	@echo "make test-fast - the quick lane for development: no Spark jobs end to end, subprocesses or notebooks"
	@echo "make test-native - the native codec core's own tests (cargo test)"
	@echo "make test-python-path - every codec test on the Python path (MSGLAKE_NATIVE=0)"
	@echo "make bench  - run the ingest and streaming benchmarks (see benchmarks/)"
	@echo "make setup  - only create .venv, install msglake (and build its native codec core) and fetch the Delta jars"

# msglake and its dependencies are installed by uv (from PyPI, into the venv): the same versions
# as pip resolves, in 33-46 s against pip's 73-115 s (with and without a download cache), most of
# it pip building pyspark's source package and downloading one file at a time. pip stays in the
# venv for the native core's build and the wheel test.
# uv writes no bytecode unless asked (pip does), and where PYTHONDONTWRITEBYTECODE is set (this
# machine kind, many container images) Python never writes it either: every process (a command, a
# Spark Python worker, a streaming source's planner) then compiled pyspark, pyarrow and pandas from
# source again, about 1.2 s each (the worked example's replay, a new process: 21.8-23.3 -> 18.3-19.7 s).
$(BIN)/.installed: pyproject.toml
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip 'uv>=0.13,<0.14'
	$(BIN)/uv pip install --quiet --compile-bytecode --python $(BIN)/python -e '.[dev]'
	touch $@

# msglake's own modules (the editable install's sources, which uv does not compile), for the same
# reason; again whenever a source changes.
PY_PACKAGES := msglake conf pipelines schemas transforms quality formats samples
PY_SRC := $(wildcard $(addsuffix /*.py,$(PY_PACKAGES)) $(addsuffix /*/*.py,$(PY_PACKAGES)) $(addsuffix /*/*/*.py,$(PY_PACKAGES)))
$(BIN)/.bytecode: $(BIN)/.installed $(PY_SRC)
	$(BIN)/python -m compileall -q $(PY_PACKAGES)
	touch $@

# The native codec core (native/, Rust): built from source into .venv. Without cargo, or if the
# build fails, the codecs use their Python path (an older build is removed, not kept half
# matching the code); one line says what to install.
NATIVE_SRC := $(wildcard native/src/*.rs native/src/*/*.rs) native/Cargo.toml native/Cargo.lock native/pyproject.toml
NATIVE_LOG  := $(VENV)/native-build.log
NATIVE_HINT := msglake: native codec core not built (log: $(NATIVE_LOG)), decoding with the slower Python path; install Rust with cargo (https://rustup.rs), then make setup

$(BIN)/.native: $(BIN)/.installed $(NATIVE_SRC)
	@if command -v cargo >/dev/null 2>&1 && MAKEFLAGS= $(BIN)/pip install ./native >$(NATIVE_LOG) 2>&1; then touch $@; \
	else command -v cargo >/dev/null 2>&1 || echo "cargo not found" >$(NATIVE_LOG); \
	    $(BIN)/pip uninstall --quiet --yes msglake-native >/dev/null 2>&1; echo "$(NATIVE_HINT)"; fi

$(JARS)/.complete: jars/pom.xml
	@command -v mvn >/dev/null || { echo "Maven (mvn) is needed once to fetch the Delta jars from Maven Central"; exit 1; }
	rm -rf $(JARS) && mkdir -p $(JARS)
	mvn --quiet --batch-mode -f jars/pom.xml dependency:copy-dependencies \
	    -DincludeScope=runtime -DexcludeGroupIds=$(JAR_EXCLUDES) -DoutputDirectory=$(abspath $(JARS))
	touch $@

# msglake's one JVM class (jars/src/): Hadoop's local file system setting permissions by a system
# call instead of a chmod process per file and folder it creates (see the class), compiled with
# the JDK's javac against pyspark's own Hadoop. The session factory uses it in local mode when
# the jar is there; without javac, or if the build fails, one line says Spark keeps Hadoop's own
# (slower on many files), and the set-up goes on. The jar is written whole or not at all.
FS_JAR := $(JARS)/msglake-hadoop-fs.jar
FS_SRC := $(wildcard jars/src/msglake/hadoop/*.java)
FS_LOG := $(VENV)/hadoop-fs-build.log
FS_HINT := msglake: local file system not built, Spark writes local files through Hadoop's own (a chmod process per file); install a JDK 17 with javac, then make setup
$(FS_JAR): $(FS_SRC) $(BIN)/.installed $(JARS)/.complete
	@rm -rf $(JARS)/classes $@ $@.tmp; \
	if ! command -v javac >/dev/null 2>&1; then echo "$(FS_HINT) (javac not found)"; \
	else api=$$(ls $(VENV)/lib/python*/site-packages/pyspark/jars/hadoop-client-api-*.jar | head -1); \
	    if javac --release 17 -nowarn -cp "$$api" -d $(JARS)/classes $(FS_SRC) >$(FS_LOG) 2>&1 \
	        && jar cf $@.tmp -C $(JARS)/classes . >>$(FS_LOG) 2>&1; then mv $@.tmp $@; \
	    else rm -f $@.tmp; echo "$(FS_HINT) (log: $(FS_LOG))"; fi; \
	    rm -rf $(JARS)/classes; fi

# The driver JVM's class archive (pipelines/class_archive.py): a small local job run once with
# -XX:ArchiveClassesAtExit; later local starts map it (4-6 s less each). After the local file
# system jar, which is on the class path the archive is checked against. Not after the native
# core: the job decodes on the Python path, so the two build side by side (setup 156 -> 126 s
# for the native core, its tests and the archive). If it cannot be made, one line says so and
# the set-up goes on.
CDS_ARCHIVE := $(JARS)/msglake-classes.jsa
CDS_LOG := $(VENV)/class-archive.log
$(CDS_ARCHIVE): $(BIN)/.installed $(JARS)/.complete $(FS_JAR)
	@$(BIN)/python -m msglake.pipelines.class_archive >$(CDS_LOG) 2>&1 \
	    || echo "msglake: driver class archive not made (log: $(CDS_LOG)); local Spark starts take a few seconds longer"

setup: $(BIN)/.installed $(BIN)/.bytecode $(BIN)/.native $(JARS)/.complete $(FS_JAR) $(CDS_ARCHIVE)

demo: setup
	$(BIN)/msglake demo

# With cargo on the machine the native core must have been built: its tests then fail, not skip.
# On pytest-xdist's workers (a worker per core, as memory allows), each with its own SparkSession,
# taking a file's tests at a time, the longest first (tests/conftest.py: pytest_xdist_make_scheduler).
TEST_WORKERS ?= auto
test: setup test-native test-python-path
	MSGLAKE_REQUIRE_NATIVE=$$(command -v cargo >/dev/null 2>&1 && echo 1 || echo 0) $(BIN)/python -m pytest \
	    -n $(TEST_WORKERS) --dist loadfile

# The crate's own unit tests (framing, fields, headers, properties); a few seconds.
test-native: $(BIN)/.native
	@if command -v cargo >/dev/null 2>&1; then MAKEFLAGS= PYO3_PYTHON=$(abspath $(BIN)/python) cargo test --quiet --release \
	    --manifest-path native/Cargo.toml; else echo "cargo not found: the native crate's tests are skipped"; fi

# Every codec test on the Python path too (the reference the native core is checked against;
# the default run takes the native path where it is built): about 25 s on one core.
test-python-path: setup
	MSGLAKE_NATIVE=0 $(BIN)/python -m pytest -q -p no:cacheprovider tests/formats \
	    --ignore=tests/formats/test_native.py  # it makes codecs of both paths itself

test-fast: setup
	$(BIN)/python -m pytest -m "not slow"

# The Java peer of the decode benchmarks (benchmarks/java/: RocketMQ's own MessageDecoder), built
# once with Maven and checked on the real broker files; without java, mvn or taskset one line says
# the peer is skipped. Bench only: make test never builds it.
PEER_STAMP := benchmarks/java/target/.built
$(PEER_STAMP): benchmarks/java/pom.xml $(wildcard benchmarks/java/src/main/java/msglake/bench/*.java) | $(BIN)/.installed
	$(BIN)/python benchmarks/java_peer.py

bench: setup $(PEER_STAMP)
	$(BIN)/python benchmarks/suite.py
	$(BIN)/python benchmarks/bench_decode.py
	$(BIN)/python benchmarks/bench_ingest.py --format nsq-ext
	$(BIN)/python benchmarks/bench_ingest.py --format rocketmq-commitlog
	$(BIN)/python benchmarks/bench_stream.py
	$(BIN)/python benchmarks/bench_replay.py
	$(BIN)/python benchmarks/bench_semantics_lag.py
	$(BIN)/python benchmarks/bench_history.py
	$(BIN)/python benchmarks/bench_worked_example.py
	$(BIN)/python benchmarks/bench_trace.py
	$(BIN)/python benchmarks/bench_sql.py
	$(BIN)/python benchmarks/bench_small_segments.py
	$(BIN)/python benchmarks/bench_many_topics.py

clean-demo:
	rm -rf lake demo-data
