package io.mcore4j.parallel.nccl;

import ai.djl.ndarray.NDArray;
import ai.djl.ndarray.types.DataType;
import ai.djl.ndarray.types.Shape;

import java.io.PrintStream;

/**
 * Counts and prints the results of {@link NcclCollectivesCheck}: one {@code PASS} or {@code FAIL}
 * line per check, prefixed by the rank.
 */
final class CheckReport {
    private final int rank;
    private final PrintStream out;
    private int passed;
    private int failed;

    CheckReport(int rank, PrintStream out) {
        this.rank = rank;
        this.out = out;
    }

    /** Largest error allowed, relative to the operands' magnitude: 0 for integers. */
    static double tolerance(DataType dtype) {
        return switch (dtype) {
            case FLOAT16 -> 1e-2;
            case FLOAT32 -> 1e-6;
            case FLOAT64 -> 1e-12;
            default -> 0;
        };
    }

    /** Runs one check; an exception is a failure with its message. */
    void run(String name, Check check) {
        try {
            String detail = check.run();
            if (detail == null) {
                pass(name, "");
            } else {
                fail(name, detail);
            }
        } catch (Throwable t) {
            fail(name, t.toString());
        }
    }

    /**
     * Compares {@code got} with {@code expected}.
     *
     * @param scale magnitude of the operands; the error allowed is {@code tolerance(dtype) * max(1, scale, |expected|)}
     * @return null if equal within the tolerance, else what differs
     */
    static String compare(double[] expected, Shape shape, NDArray got, DataType dtype, double scale) {
        if (!shape.equals(got.getShape())) {
            return "shape " + got.getShape() + ", expected " + shape;
        }
        if (got.getDataType() != dtype) {
            return "dtype " + got.getDataType() + ", expected " + dtype;
        }
        double[] g = got.toType(DataType.FLOAT64, false).toDoubleArray();
        double magnitude = Math.max(1, scale);
        for (double e : expected) {
            magnitude = Math.max(magnitude, Math.abs(e));
        }
        double worst = 0;
        int at = -1;
        for (int i = 0; i < g.length; i++) {
            double err = Math.abs(g[i] - expected[i]);
            if (!(err <= worst)) {
                worst = Double.isNaN(err) ? Double.POSITIVE_INFINITY : err;
                at = i;
            }
        }
        if (worst > tolerance(dtype) * magnitude) {
            return "element " + at + " is " + g[at] + ", expected " + expected[at] + " (max error " + worst + ")";
        }
        return null;
    }

    void pass(String name, String detail) {
        passed++;
        out.println("[rank " + rank + "] PASS " + name + (detail.isEmpty() ? "" : " " + detail));
    }

    void fail(String name, String detail) {
        failed++;
        out.println("[rank " + rank + "] FAIL " + name + ": " + detail);
    }

    int failed() {
        return failed;
    }

    String summary() {
        return "[rank " + rank + "] " + passed + " passed, " + failed + " failed";
    }

    /** One check: returns null when it passes, else what went wrong. */
    interface Check {
        String run() throws Exception;
    }
}
