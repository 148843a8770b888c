package msglake.bench;

import java.io.IOException;
import java.lang.reflect.Field;
import java.nio.ByteBuffer;
import java.nio.channels.FileChannel;
import java.nio.file.Path;
import java.nio.file.StandardOpenOption;
import java.util.ArrayList;
import java.util.List;
import org.apache.rocketmq.common.message.MessageDecoder;
import org.apache.rocketmq.common.message.MessageExt;
import org.apache.rocketmq.common.sysflag.MessageSysFlag;
import sun.misc.Unsafe;

/**
 * RocketMQ's own {@link MessageDecoder} over CommitLog files: the peer that benchmarks/suite.py and
 * bench_decode.py time next to msglake's decode, on the same files.
 *
 * <pre>java -cp 'target/classes:target/lib/*' msglake.bench.PeerDecode [--messages N] [--check-crc]
 *     [--map-per-pass] FILE...</pre>
 *
 * Each file is mapped once, before the first pass, and every pass reads that mapping (its pages
 * stay mapped: the timed passes take no page fault); with {@code --map-per-pass} each pass maps
 * the file and unmaps it after, as each of msglake's decode calls does. A file is walked as the
 * broker's recovery walks it
 * ({@code CommitLog.checkMessageAndReturnSize}): a record is decoded with
 * {@code MessageDecoder.decode(buf, readBody=true, deCompressBody=false, isClient=false,
 * isSetPropertiesString=false, checkCRC)}, {@code checkCRC} false (the decoder's default) unless
 * {@code --check-crc} is given: msglake checks BODYCRC unless its {@code verifyCrc} is off, so the two
 * are compared doing the same work, both ways;
 * {@code BLANK_MAGIC_CODE} (the end-of-file record) or a zero TOTALSIZE and MAGIC (the unwritten tail
 * of a pre-sized file) ends the file. Anything else that does not decode is an error, not an end:
 * the decoder itself only returns null, so a damaged file would otherwise pass as a short one.
 * Inner-batch records are unwrapped as the consumer does ({@code PullAPIWrapper}), one message
 * each, so messages count as msglake's rows do. Untimed passes warm the JIT until they have decoded
 * {@code --messages} (default 2,000,000), then timed passes run until they have too, at least
 * {@link #MIN_PASSES}: counted in work, as a small data set needs many passes and a large one few.
 * One JSON line on stdout gives the fastest pass.
 */
public final class PeerDecode {
    private static final int UNWRAP = MessageSysFlag.INNER_BATCH_FLAG | MessageSysFlag.NEED_UNWRAP_FLAG;
    private static final int MIN_PASSES = 3;

    /** What one pass decoded; {@code sink} sums a few fields so the JIT cannot drop the decoding. */
    static final class Pass {
        long records, messages, bytes, sink;
    }

    /** Whether BODYCRC is checked ({@code --check-crc}). */
    private static boolean checkCrc;
    /** Whether each pass maps its files and unmaps them after ({@code --map-per-pass}), as each of
     * msglake's decode calls does, instead of all passes reading one mapping made before them. */
    private static boolean mapPerPass;
    /** The files' mappings every pass reads, made before the first (none with {@code --map-per-pass}). */
    private static final List<ByteBuffer> KEPT = new ArrayList<>();
    /** What unmaps a mapping at once ({@code invokeCleaner}), not when the collector finds it. */
    private static final Unsafe UNSAFE = unsafe();

    public static void main(String[] args) throws IOException {
        long work = 2_000_000;
        List<Path> files = new ArrayList<>();
        for (int i = 0; i < args.length; i++) {
            if (args[i].equals("--messages")) {
                work = Long.parseLong(args[++i]);
            } else if (args[i].equals("--check-crc")) {
                checkCrc = true;
            } else if (args[i].equals("--map-per-pass")) {
                mapPerPass = true;
            } else {
                files.add(Path.of(args[i]));
            }
        }
        if (files.isEmpty()) {
            throw new IllegalArgumentException(
                "usage: PeerDecode [--messages N] [--check-crc] [--map-per-pass] FILE...");
        }
        if (!mapPerPass) {
            for (Path file : files) {
                KEPT.add(map(file));
            }
        }
        Pass first = decodeAll(files);
        if (first.messages == 0) {
            throw new IllegalStateException("no message in " + files.size() + " file(s)");
        }
        int warmup = 1;
        for (long done = first.messages; done < work; warmup++) {
            done += decodeAll(files).messages;
        }
        long best = Long.MAX_VALUE;
        int passes = 0;
        for (long done = 0; passes < MIN_PASSES || done < work; passes++) {
            long started = System.nanoTime();
            done += decodeAll(files).messages;
            best = Math.min(best, System.nanoTime() - started);
        }
        double seconds = best / 1e9;
        System.out.printf("{\"records\": %d, \"messages\": %d, \"bytes\": %d, \"seconds\": %.9f, "
                + "\"messagesPerS\": %.1f, \"warmupPasses\": %d, \"passes\": %d, \"sink\": %d, \"checkCrc\": %b, "
                + "\"mapPerPass\": %b}%n",
            first.records, first.messages, first.bytes, seconds, first.messages / seconds, warmup, passes, first.sink,
            checkCrc, mapPerPass);
    }

    private static Unsafe unsafe() {
        try {
            Field f = Unsafe.class.getDeclaredField("theUnsafe");
            f.setAccessible(true);
            return (Unsafe) f.get(null);
        } catch (ReflectiveOperationException e) {
            throw new IllegalStateException(e);
        }
    }

    /** The whole file, mapped read-only (a CommitLog file is at most 1 GiB by default, under 2 GiB by type). */
    static ByteBuffer map(Path file) throws IOException {
        try (FileChannel ch = FileChannel.open(file, StandardOpenOption.READ)) {
            return ch.map(FileChannel.MapMode.READ_ONLY, 0, ch.size());
        }
    }

    /** One pass over every file, in the order given (the CommitLog's offset order). */
    static Pass decodeAll(List<Path> files) throws IOException {
        Pass p = new Pass();
        for (int i = 0; i < files.size(); i++) {
            ByteBuffer buf = mapPerPass ? map(files.get(i)) : KEPT.get(i);
            decodeFile(buf.duplicate(), p);
            if (mapPerPass) {
                UNSAFE.invokeCleaner(buf);
            }
        }
        return p;
    }

    /** Every record of one file, from its start to its end record, zero tail or last byte. */
    static void decodeFile(ByteBuffer buf, Pass p) {
        while (buf.remaining() >= 8) {
            int at = buf.position();
            int size = buf.getInt(at);
            int magic = buf.getInt(at + MessageDecoder.MESSAGE_MAGIC_CODE_POSITION);
            if (magic == MessageDecoder.BLANK_MAGIC_CODE || (size == 0 && magic == 0)) {
                return;
            }
            MessageExt m = MessageDecoder.decode(buf, true, false, false, false, checkCrc);
            if (m == null || buf.position() != at + size) {
                throw new IllegalStateException("no whole record at position " + at + " (TOTALSIZE " + size
                    + ", MAGIC " + Integer.toHexString(magic) + ")");
            }
            p.records++;
            p.bytes += size;
            if ((m.getSysFlag() & UNWRAP) == UNWRAP) {
                unwrap(m, p);
            } else {
                count(m, p);
            }
        }
    }

    /** An inner-batch record's messages, as {@code PullAPIWrapper.processPullResult} unwraps them. */
    static void unwrap(MessageExt batch, Pass p) {
        List<MessageExt> inner = new ArrayList<>();
        try {
            MessageDecoder.decodeMessage(batch, inner);
        } catch (Exception e) {
            throw new IllegalStateException("inner batch at " + batch.getCommitLogOffset() + " does not decode", e);
        }
        for (MessageExt m : inner) {
            count(m, p);
        }
    }

    static void count(MessageExt m, Pass p) {
        p.messages++;
        byte[] body = m.getBody();
        p.sink += (body == null ? 0 : body.length) + m.getProperties().size() + m.getTopic().length();
    }
}
