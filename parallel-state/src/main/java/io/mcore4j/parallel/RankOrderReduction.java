package io.mcore4j.parallel;

import ai.djl.ndarray.NDArray;
import ai.djl.ndarray.NDManager;
import ai.djl.ndarray.types.DataType;
import io.mcore4j.core.DataTypes;
import io.mcore4j.core.Tensors;

/**
 * Elementwise reduction of every member's contribution, in rank order: starting from a copy of
 * rank 0's values, add (or take max / min with) rank 1's, then rank 2's, and so on; AVG divides
 * the sum by the member count (integers truncate toward zero, via float64). This is the exact
 * sequence of libtorch operations in every backend (in-JVM, TCP), so they give bitwise identical
 * results, and every member, doing the same on the same bytes, gets the same result.
 */
public final class RankOrderReduction {
    private RankOrderReduction() {}

    /**
     * @param inputs contributions in rank order, same shape and dtype; not modified
     * @param op the reduction
     * @param owner manager that owns the result
     * @return a new tensor owned by {@code owner}; intermediates are released
     */
    public static NDArray reduce(NDArray[] inputs, ReduceOp op, NDManager owner) {
        NDArray acc = inputs[0].duplicate();
        acc.attach(owner);
        for (int i = 1; i < inputs.length; i++) {
            switch (op) {
                case SUM, AVG -> acc.addi(inputs[i]);
                case MAX -> acc = replace(acc, acc.maximum(inputs[i]), owner);
                case MIN -> acc = replace(acc, acc.minimum(inputs[i]), owner);
            }
        }
        if (op == ReduceOp.AVG && inputs.length > 1) {
            if (Tensors.isFloating(DataTypes.of(acc))) {
                acc.divi(inputs.length);
            } else {
                DataType t = DataTypes.of(acc);
                try (NDManager temp = owner.newSubManager()) {
                    NDArray wide = acc.toType(DataType.FLOAT64, false);
                    wide.attach(temp);
                    NDArray quotient = wide.div(inputs.length);
                    quotient.attach(temp);
                    NDArray truncated = DataTypes.toType(quotient, t, false);
                    acc = replace(acc, truncated, owner);
                }
            }
        }
        return acc;
    }

    private static NDArray replace(NDArray old, NDArray fresh, NDManager owner) {
        fresh.attach(owner);
        old.close();
        return fresh;
    }
}
