package io.mcore4j.parallel;

/** Reduction applied by all-reduce and reduce-scatter. */
public enum ReduceOp {
    /** Elementwise sum. */
    SUM,
    /** Elementwise sum divided by the group size (integer division for integer dtypes). */
    AVG,
    /** Elementwise maximum. */
    MAX,
    /** Elementwise minimum. */
    MIN
}
