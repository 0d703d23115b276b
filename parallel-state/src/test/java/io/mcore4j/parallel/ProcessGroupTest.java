package io.mcore4j.parallel;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertThrows;

import org.junit.jupiter.api.Test;

/** Whether a backend of a given rank and world can serve a group. */
class ProcessGroupTest {
    private static final ProcessGroup TP = ProcessGroup.of("tp", new int[] {2, 3}, 3);

    @Test
    void aGroupFitsTheBackendOfTheRankItPlacesWithinTheWorld() {
        TP.checkPlacement(3, 4);
        assertEquals("group tp[2,3]@1 does not place rank 2 at index 1",
                assertThrows(IllegalArgumentException.class, () -> TP.checkPlacement(2, 4)).getMessage());
        assertEquals("group tp[2,3]@1 names rank 3 outside world size 3",
                assertThrows(IllegalArgumentException.class, () -> TP.checkPlacement(3, 3)).getMessage());
    }
}
