package io.mcore4j.parallel.nccl;

import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertTrue;

import org.junit.jupiter.api.Test;

/** When a captured collective warns about NCCL's graph mixing support; runs without CUDA. */
class GraphMixingWarningTest {

    @Test
    void warnsOnceUnlessTheSupportIsOff() {
        assertFalse(NcclComm.noteCaptured("0"), "NCCL_GRAPH_MIXING_SUPPORT=0 needs no warning");
        assertTrue(NcclComm.noteCaptured(null), "unset means NCCL's default, 1: warn");
        assertFalse(NcclComm.noteCaptured(null), "once per process");
        assertFalse(NcclComm.noteCaptured("1"), "once per process");
    }
}
