package io.mcore4j.training.metrics;

import java.io.ByteArrayOutputStream;
import java.io.IOException;
import java.io.OutputStream;
import java.io.UncheckedIOException;
import java.net.InetAddress;
import java.nio.ByteBuffer;
import java.nio.ByteOrder;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.nio.file.StandardOpenOption;
import java.util.Map;
import java.util.zip.CRC32C;

/**
 * Writes TensorBoard event files ({@code --tensorboard-dir}) in pure Java: each logged scalar becomes
 * an {@code Event} protocol buffer with a {@code Summary} holding one {@code simple_value} under its
 * Megatron name and the iteration as step, framed as a TFRecord (length, masked CRC32C of the length,
 * payload, masked CRC32C of the payload). TensorBoard reads the folder as one run; each run (fresh or
 * resumed) adds its own {@code events.out.tfevents.<seconds>.<host>.<pid>} file, which TensorBoard
 * merges by step. Records are flushed after every logged iteration.
 */
public final class TensorBoardSink extends AppendingFileSink {
    private final Path directory;
    private Path file;

    /**
     * @param directory the TensorBoard log folder (created if needed)
     */
    public TensorBoardSink(Path directory) {
        super("TensorBoard event file");
        this.directory = directory;
    }

    /** @return the event file being written, or null before the first record */
    public Path file() {
        return file;
    }

    @Override
    public void begin(long startIteration, long trainIterations) {
        if (isOpen()) {
            return;
        }
        double now = System.currentTimeMillis() / 1000.0;
        try {
            Files.createDirectories(directory);
            String host;
            try {
                host = InetAddress.getLocalHost().getHostName();
            } catch (IOException e) {
                host = "localhost";
            }
            file = directory.resolve(String.format("events.out.tfevents.%d.%s.%d", (long) now, host,
                    ProcessHandle.current().pid()));
            open(file, StandardOpenOption.CREATE_NEW);
        } catch (IOException e) {
            throw new UncheckedIOException("cannot create a TensorBoard event file in " + directory, e);
        }
        ProtoWriter event = new ProtoWriter();
        event.fixed64(1, now);
        event.string(3, "brain.Event:2");
        byte[] version = event.bytes();
        append(out -> record(out, version));
    }

    @Override
    public void write(long iteration, Map<String, Double> scalars) {
        begin(0, 0);
        double now = System.currentTimeMillis() / 1000.0;
        append(out -> {
            for (Map.Entry<String, Double> e : scalars.entrySet()) {
                if (e.getValue() == null) {
                    continue;
                }
                ProtoWriter value = new ProtoWriter();
                value.string(1, e.getKey());
                value.fixed32(2, e.getValue().floatValue());
                ProtoWriter summary = new ProtoWriter();
                summary.message(1, value.bytes());
                ProtoWriter event = new ProtoWriter();
                event.fixed64(1, now);
                event.varint(2, iteration);
                event.message(5, summary.bytes());
                record(out, event.bytes());
            }
        });
    }

    /** One TFRecord: little-endian length, its masked CRC32C, the payload and its masked CRC32C. */
    private static void record(OutputStream out, byte[] payload) throws IOException {
        ByteBuffer header = ByteBuffer.allocate(12).order(ByteOrder.LITTLE_ENDIAN);
        header.putLong(payload.length);
        header.putInt(maskedCrc32c(header.array(), 0, 8));
        out.write(header.array());
        out.write(payload);
        ByteBuffer footer = ByteBuffer.allocate(4).order(ByteOrder.LITTLE_ENDIAN);
        footer.putInt(maskedCrc32c(payload, 0, payload.length));
        out.write(footer.array());
    }

    /**
     * TFRecord's masked CRC32C: the CRC rotated right by 15 bits plus 0xa282ead8.
     *
     * @param data bytes
     * @param offset first byte
     * @param length number of bytes
     * @return the masked checksum
     */
    static int maskedCrc32c(byte[] data, int offset, int length) {
        CRC32C crc = new CRC32C();
        crc.update(data, offset, length);
        int c = (int) crc.getValue();
        return ((c >>> 15) | (c << 17)) + 0xa282ead8;
    }

    /** The protocol-buffer wire format, for the few field kinds an Event needs. */
    static final class ProtoWriter {
        private final ByteArrayOutputStream buf = new ByteArrayOutputStream();

        void varint(int field, long value) {
            tag(field, 0);
            rawVarint(value);
        }

        void fixed64(int field, double value) {
            tag(field, 1);
            long bits = Double.doubleToRawLongBits(value);
            for (int i = 0; i < 8; i++) {
                buf.write((int) (bits >>> (8 * i)));
            }
        }

        void fixed32(int field, float value) {
            tag(field, 5);
            int bits = Float.floatToRawIntBits(value);
            for (int i = 0; i < 4; i++) {
                buf.write(bits >>> (8 * i));
            }
        }

        void string(int field, String value) {
            message(field, value.getBytes(StandardCharsets.UTF_8));
        }

        void message(int field, byte[] bytes) {
            tag(field, 2);
            rawVarint(bytes.length);
            buf.writeBytes(bytes);
        }

        private void tag(int field, int wireType) {
            rawVarint(((long) field << 3) | wireType);
        }

        private void rawVarint(long v) {
            while ((v & ~0x7FL) != 0) {
                buf.write((int) ((v & 0x7F) | 0x80));
                v >>>= 7;
            }
            buf.write((int) v);
        }

        byte[] bytes() {
            return buf.toByteArray();
        }
    }
}
