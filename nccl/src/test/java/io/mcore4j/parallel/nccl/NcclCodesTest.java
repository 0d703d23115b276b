package io.mcore4j.parallel.nccl;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import ai.djl.ndarray.types.DataType;
import io.mcore4j.parallel.ReduceOp;

import org.junit.jupiter.api.Test;

/** The values are nccl.h's ncclDataType_t and ncclRedOp_t; this test runs without CUDA. */
class NcclCodesTest {

    @Test
    void dtypesMapToNcclDataTypes() {
        assertEquals(0, NcclCodes.dataType(DataType.INT8));
        assertEquals(1, NcclCodes.dataType(DataType.UINT8));
        assertEquals(2, NcclCodes.dataType(DataType.INT32));
        assertEquals(4, NcclCodes.dataType(DataType.INT64));
        assertEquals(6, NcclCodes.dataType(DataType.FLOAT16));
        assertEquals(7, NcclCodes.dataType(DataType.FLOAT32));
        assertEquals(8, NcclCodes.dataType(DataType.FLOAT64));
        for (DataType t : NcclCodes.SUPPORTED) {
            NcclCodes.dataType(t);
        }
    }

    @Test
    void bfloat16IsNcclsBfloat16() {
        assertEquals(9, NcclCodes.dataType(DataType.BFLOAT16)); // ncclBfloat16 in nccl.h
    }

    @Test
    void reductionsMapToNcclOps() {
        assertEquals(0, NcclCodes.reduceOp(ReduceOp.SUM));
        assertEquals(2, NcclCodes.reduceOp(ReduceOp.MAX));
        assertEquals(3, NcclCodes.reduceOp(ReduceOp.MIN));
        assertEquals(4, NcclCodes.reduceOp(ReduceOp.AVG));
    }

    @Test
    void unsupportedDtypesAreNamed() {
        IllegalArgumentException e = assertThrows(IllegalArgumentException.class, () -> NcclCodes.dataType(DataType.BOOLEAN));
        assertTrue(e.getMessage().contains("boolean") && e.getMessage().contains("bfloat16"), e.getMessage());
        assertThrows(IllegalArgumentException.class, () -> NcclCodes.dataType(DataType.STRING));
    }
}
