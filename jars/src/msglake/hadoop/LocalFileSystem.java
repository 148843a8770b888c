package msglake.hadoop;

import java.io.IOException;
import java.nio.file.Files;
import java.nio.file.attribute.PosixFilePermission;
import java.util.EnumSet;
import java.util.Set;

import org.apache.hadoop.fs.FileStatus;
import org.apache.hadoop.fs.Path;
import org.apache.hadoop.fs.RawLocalFileSystem;
import org.apache.hadoop.fs.permission.FsPermission;
import org.apache.hadoop.io.nativeio.NativeIO;

/**
 * Hadoop's local file system ({@code file:}) without a process per file it creates or renames.
 *
 * <p>Without Hadoop's native library, {@link RawLocalFileSystem} sets the permission of every
 * file and folder it creates by starting a {@code chmod} process (about three and a half per
 * Parquet file Spark writes: the file, its {@code .crc}, the partition folders), and looks for a
 * symbolic link before each rename by starting {@code readlink}: a few milliseconds each. A
 * micro-batch that touches a thousand topic partitions writes a thousand files and spent most of
 * its write waiting for those processes. {@link Raw} does both with system calls: the same mode
 * bits through {@link Files#setPosixFilePermissions}, and Hadoop's own answer for anything that
 * is a link. Where the two could differ, Hadoop's own way is kept: a mode with the sticky bit
 * (POSIX permissions cannot name it), and a folder or file that has its setuid or setgid bit
 * (the {@code chmod} command keeps those on a folder; the system call would clear them, and
 * with them a shared folder's group inheritance).
 */
public class LocalFileSystem extends org.apache.hadoop.fs.LocalFileSystem {

    public LocalFileSystem() {
        super(new Raw());
    }

    /** The raw (checksum-less) file system under the checksummed one; {@link LocalFs} uses it too. */
    public static class Raw extends RawLocalFileSystem {

        /** setuid and setgid. */
        private static final int SET_ID_BITS = 06000;

        /** Permission bits from the lowest (others execute) up. */
        private static final PosixFilePermission[] BITS = {
            PosixFilePermission.OTHERS_EXECUTE, PosixFilePermission.OTHERS_WRITE, PosixFilePermission.OTHERS_READ,
            PosixFilePermission.GROUP_EXECUTE, PosixFilePermission.GROUP_WRITE, PosixFilePermission.GROUP_READ,
            PosixFilePermission.OWNER_EXECUTE, PosixFilePermission.OWNER_WRITE, PosixFilePermission.OWNER_READ,
        };

        @Override
        public void setPermission(Path p, FsPermission permission) throws IOException {
            short mode = permission.toShort();
            java.nio.file.Path path = pathToFile(p).toPath();
            if (NativeIO.isAvailable() || (mode & ~0777) != 0
                    || (((Integer) Files.getAttribute(path, "unix:mode")) & SET_ID_BITS) != 0) {
                super.setPermission(p, permission);
                return;
            }
            Set<PosixFilePermission> set = EnumSet.noneOf(PosixFilePermission.class);
            for (int bit = 0; bit < BITS.length; bit++) {
                if ((mode & (1 << bit)) != 0) {
                    set.add(BITS[bit]);
                }
            }
            Files.setPosixFilePermissions(path, set);
        }

        @Override
        public FileStatus getFileLinkStatus(Path f) throws IOException {
            // Not a link (or missing, which getFileStatus reports as Hadoop does): the status is
            // the file's own, which is what Hadoop returns after readlink printed nothing.
            if (Files.isSymbolicLink(pathToFile(f).toPath())) {
                return super.getFileLinkStatus(f);
            }
            return getFileStatus(f);
        }
    }
}
