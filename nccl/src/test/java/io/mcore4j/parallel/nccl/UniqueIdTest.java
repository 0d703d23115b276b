package io.mcore4j.parallel.nccl;

import static org.junit.jupiter.api.Assertions.assertArrayEquals;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertNotEquals;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import org.junit.jupiter.api.Test;

class UniqueIdTest {

    private static byte[] pattern(int seed) {
        byte[] b = new byte[UniqueId.BYTES];
        for (int i = 0; i < b.length; i++) {
            b[i] = (byte) (i * 31 + seed);
        }
        return b;
    }

    @Test
    void storeValueRoundTripsAndIsCopied() {
        byte[] raw = pattern(7);
        UniqueId id = new UniqueId(raw);
        raw[0] ^= 1;
        byte[] stored = id.bytes();
        assertEquals(128, stored.length);
        assertArrayEquals(pattern(7), stored);
        stored[1] ^= 1;
        assertArrayEquals(pattern(7), id.bytes(), "bytes() must return a copy");
        assertEquals(id, UniqueId.decode(pattern(7), "nccl/world"));
        assertNotEquals(id, new UniqueId(pattern(8)));
    }

    @Test
    void wrongLengthsAreRejectedNamingTheKey() {
        assertThrows(IllegalArgumentException.class, () -> new UniqueId(new byte[127]));
        assertThrows(IllegalArgumentException.class, () -> new UniqueId(null));
        IllegalStateException e = assertThrows(IllegalStateException.class, () -> UniqueId.decode(new byte[3], "nccl/tp[0,1]"));
        assertTrue(e.getMessage().contains("nccl/tp[0,1]") && e.getMessage().contains("3 bytes"), e.getMessage());
    }

    @Test
    void toStringDoesNotPrintTheBytes() {
        String s = new UniqueId(pattern(1)).toString();
        assertTrue(s.startsWith("UniqueId[") && s.length() < 32, s);
    }
}
