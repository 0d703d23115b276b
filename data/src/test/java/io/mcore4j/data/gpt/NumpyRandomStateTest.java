package io.mcore4j.data.gpt;

import com.google.gson.JsonElement;
import com.google.gson.JsonObject;
import org.junit.jupiter.api.Test;

import java.util.Arrays;
import java.util.Map;

import static org.junit.jupiter.api.Assertions.assertArrayEquals;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertThrows;

/** numpy's RandomState, checked against numbers numpy itself wrote (numpy_random_state.json). */
class NumpyRandomStateTest {
    @Test
    void seedingShufflesAndPermutationsMatchNumpy() {
        JsonObject fixture = MegatronFixtures.load("numpy_random_state.json");
        int seeds = 0;
        for (JsonElement e : fixture.getAsJsonArray("seeds")) {
            JsonObject seed = e.getAsJsonObject();
            long value = seed.get("seed").getAsLong();
            NumpyRandomState random = new NumpyRandomState(value);
            long[] head = MegatronFixtures.longs(seed.get("key_head"));
            for (int i = 0; i < head.length; i++) {
                assertEquals(head[i], random.stateWord(i), "seed " + value + " state word " + i);
            }
            long[] tail = MegatronFixtures.longs(seed.get("key_tail"));
            assertEquals(tail[0], random.stateWord(622), "seed " + value);
            assertEquals(tail[1], random.stateWord(623), "seed " + value);
            // the draws follow in the order the script made them: permutations by increasing n, then the shuffle
            for (Map.Entry<String, JsonElement> p : seed.getAsJsonObject("permutations").entrySet().stream()
                    .sorted((a, b) -> Integer.compare(Integer.parseInt(a.getKey()), Integer.parseInt(b.getKey()))).toList()) {
                int n = Integer.parseInt(p.getKey());
                assertArrayEquals(MegatronFixtures.ints(p.getValue()), random.permutation(n), "seed " + value + " permutation(" + n + ")");
            }
            JsonObject shuffle = seed.getAsJsonArray("shuffles").get(0).getAsJsonObject();
            int n = shuffle.get("n").getAsInt();
            int[] big = new int[n];
            Arrays.setAll(big, i -> i);
            random.shuffle(big, 0, n);
            assertArrayEquals(MegatronFixtures.ints(shuffle.get("head")), Arrays.copyOf(big, 20), "seed " + value);
            assertArrayEquals(MegatronFixtures.ints(shuffle.get("tail")), Arrays.copyOfRange(big, n - 20, n), "seed " + value);
            long weighted = 0;
            for (int i = 0; i < n; i++) {
                weighted += (long) big[i] * i % 1_000_003;
            }
            assertEquals(shuffle.get("weighted_sum").getAsLong(), weighted, "seed " + value);
            assertArrayEquals(MegatronFixtures.ints(seed.get("after")), random.permutation(5), "seed " + value);
            seeds++;
        }
        assertEquals(7, seeds);
    }

    @Test
    void shufflingASubrangeLeavesTheRestAlone() {
        int[] values = {9, 8, 0, 1, 2, 3, 7};
        int[] alone = {0, 1, 2, 3};
        new NumpyRandomState(5).shuffle(values, 2, 6);
        new NumpyRandomState(5).shuffle(alone, 0, 4);
        assertArrayEquals(new int[] {9, 8, alone[0], alone[1], alone[2], alone[3], 7}, values);
    }

    @Test
    void seedsOutsideNumpysRangeAreRejected() {
        IllegalArgumentException e = assertThrows(IllegalArgumentException.class, () -> new NumpyRandomState(-1));
        assertEquals("seed -1 must be between 0 and 2**32 - 1 (numpy's RandomState range)", e.getMessage());
        assertThrows(IllegalArgumentException.class, () -> new NumpyRandomState(1L << 32));
    }
}
