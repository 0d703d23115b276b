package io.mcore4j.data.indexed;

import java.io.ByteArrayOutputStream;
import java.nio.charset.StandardCharsets;

/** Test helper: builds byte arrays by hand, little-endian, independent of the code under test. */
final class LittleEndianBytes {
    private final ByteArrayOutputStream out = new ByteArrayOutputStream();

    LittleEndianBytes ascii(String s) {
        out.writeBytes(s.getBytes(StandardCharsets.US_ASCII));
        return this;
    }

    LittleEndianBytes u8(int v) {
        out.write(v & 0xFF);
        return this;
    }

    LittleEndianBytes u16(int v) {
        return u8(v).u8(v >>> 8);
    }

    LittleEndianBytes i32(int v) {
        return u16(v).u16(v >>> 16);
    }

    LittleEndianBytes i64(long v) {
        return i32((int) v).i32((int) (v >>> 32));
    }

    byte[] toByteArray() {
        return out.toByteArray();
    }

    /** A complete .idx file. */
    static byte[] idx(int dtypeCode, int[] lengths, long[] pointers, long[] documentIndices, byte[] modes) {
        LittleEndianBytes b = new LittleEndianBytes().ascii("MMIDIDX\0\0").i64(1).u8(dtypeCode)
                .i64(lengths.length).i64(documentIndices.length);
        for (int v : lengths) {
            b.i32(v);
        }
        for (long v : pointers) {
            b.i64(v);
        }
        for (long v : documentIndices) {
            b.i64(v);
        }
        if (modes != null) {
            for (byte m : modes) {
                b.u8(m);
            }
        }
        return b.toByteArray();
    }
}
