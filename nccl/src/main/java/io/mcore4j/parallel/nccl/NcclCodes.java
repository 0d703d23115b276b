package io.mcore4j.parallel.nccl;

import ai.djl.ndarray.types.DataType;
import io.mcore4j.parallel.ReduceOp;

import java.util.List;

import org.bytedeco.cuda.global.nccl;

/**
 * NCCL's enum values for DJL dtypes and mcore4j reductions. The constants of
 * {@link org.bytedeco.cuda.global.nccl} used here are compile-time constants, inlined by javac, so
 * this class loads (and is unit-tested) without CUDA.
 */
final class NcclCodes {
    /** Dtypes this backend moves (bfloat16 tensors are made and named through {@link io.mcore4j.core.DataTypes}). */
    static final List<DataType> SUPPORTED = List.of(DataType.FLOAT32, DataType.FLOAT16, DataType.BFLOAT16, DataType.FLOAT64,
            DataType.INT32, DataType.INT64, DataType.INT8, DataType.UINT8);

    private NcclCodes() {}

    /**
     * @param dtype a DJL dtype
     * @return its {@code ncclDataType_t}
     * @throws IllegalArgumentException if NCCL (or this backend) does not support it
     */
    static int dataType(DataType dtype) {
        return switch (dtype) {
            case FLOAT32 -> nccl.ncclFloat32;
            case FLOAT16 -> nccl.ncclFloat16;
            case BFLOAT16 -> nccl.ncclBfloat16;
            case FLOAT64 -> nccl.ncclFloat64;
            case INT32 -> nccl.ncclInt32;
            case INT64 -> nccl.ncclInt64;
            case INT8 -> nccl.ncclInt8;
            case UINT8 -> nccl.ncclUint8;
            default -> throw new IllegalArgumentException("dtype " + dtype + " is not supported by the NCCL backend; use one of "
                    + SUPPORTED);
        };
    }

    /**
     * NCCL's average is used for {@link ReduceOp#AVG}: floating types multiply by {@code 1/n} before
     * summing (so fp16 rounds slightly differently from sum-then-divide), integer types sum and then
     * divide, truncating toward zero, as the other backends do.
     *
     * @param op a reduction
     * @return its {@code ncclRedOp_t}
     */
    static int reduceOp(ReduceOp op) {
        return switch (op) {
            case SUM -> nccl.ncclSum;
            case AVG -> nccl.ncclAvg;
            case MAX -> nccl.ncclMax;
            case MIN -> nccl.ncclMin;
        };
    }
}
