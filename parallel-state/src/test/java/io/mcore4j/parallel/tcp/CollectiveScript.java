package io.mcore4j.parallel.tcp;

import static org.junit.jupiter.api.Assertions.assertArrayEquals;
import static org.junit.jupiter.api.Assertions.assertEquals;

import ai.djl.ndarray.NDArray;
import ai.djl.ndarray.NDManager;
import ai.djl.ndarray.types.DataType;
import ai.djl.ndarray.types.Shape;
import io.mcore4j.core.DataTypes;
import io.mcore4j.core.Tensors;
import io.mcore4j.parallel.Communicator;
import io.mcore4j.parallel.ProcessGroups;
import io.mcore4j.parallel.ReduceOp;

import java.security.MessageDigest;
import java.security.NoSuchAlgorithmException;
import java.util.ArrayList;
import java.util.HexFormat;
import java.util.List;

/**
 * Every collective of every dtype, run by one rank over any backend: checks each result against a
 * serial computation on plain Java numbers and returns one line per result with the SHA-256 of its
 * bytes, so that runs on different backends (in-JVM threads, TCP threads, TCP processes) can be
 * compared bit for bit. Rank r contributes {@code value(r, i) = (r + 1) * (i % 7 - 3) + r}, as in
 * the in-JVM collectives test: small integers, exact in every dtype (bfloat16 up to 256).
 */
final class CollectiveScript {
    static final List<DataType> DTYPES =
            List.of(DataType.FLOAT32, DataType.FLOAT16, DataType.BFLOAT16, DataType.INT32, DataType.INT64, DataType.FLOAT64);
    static final int ROWS = 8;
    static final int COLS = 4;

    private CollectiveScript() {}

    static double value(int rank, int i) {
        return (rank + 1) * (i % 7 - 3) + rank;
    }

    static NDArray contribution(NDManager m, int rank, DataType dtype, int rows, int cols) {
        double[] v = new double[rows * cols];
        for (int i = 0; i < v.length; i++) {
            v[i] = value(rank, i);
        }
        NDArray d = m.create(v, new Shape(rows, cols));
        NDArray out = DataTypes.toType(d, dtype, false);
        if (out != d) {
            d.close();
        }
        return out;
    }

    /**
     * Runs every collective on {@code c} (a group of all ranks in order) and checks it.
     *
     * @param c the communicator; its group rank is the contributor index
     * @param root manager for temporaries; everything created is closed before returning
     * @return one line per result: label and digest
     */
    static List<String> run(Communicator c, NDManager root) {
        List<String> lines = new ArrayList<>();
        for (DataType dtype : DTYPES) {
            try (NDManager m = root.newSubManager()) {
                runDtype(c, m, dtype, lines);
            }
        }
        List<byte[]> bytes = c.allGatherBytes(new byte[] {(byte) c.rank(), (byte) (c.rank() * 3)});
        for (int r = 0; r < c.size(); r++) {
            assertArrayEquals(new byte[] {(byte) r, (byte) (r * 3)}, bytes.get(r), "bytes of rank " + r);
        }
        c.barrier();
        lines.add("all-gather-bytes ok");
        return lines;
    }

    private static void runDtype(Communicator c, NDManager m, DataType dtype, List<String> lines) {
        int world = c.size();
        int me = c.rank();
        boolean floating = Tensors.isFloating(dtype);
        NDArray x = contribution(m, me, dtype, ROWS, COLS);
        int n = ROWS * COLS;
        double[] sum = new double[n];
        double[] max = new double[n];
        double[] min = new double[n];
        double[] avg = new double[n];
        for (int i = 0; i < n; i++) {
            max[i] = Double.NEGATIVE_INFINITY;
            min[i] = Double.POSITIVE_INFINITY;
            for (int r = 0; r < world; r++) {
                sum[i] += value(r, i);
                max[i] = Math.max(max[i], value(r, i));
                min[i] = Math.min(min[i], value(r, i));
            }
            avg[i] = floating ? sum[i] / world : (long) (sum[i] / world);
        }
        double avgTolerance = dtype == DataType.FLOAT16 ? 1e-2 : dtype == DataType.BFLOAT16 ? 5e-2 : 1e-6;
        check(lines, "all-reduce SUM", dtype, c.allReduce(x, ReduceOp.SUM, m), sum, 0);
        check(lines, "all-reduce MAX", dtype, c.allReduce(x, ReduceOp.MAX, m), max, 0);
        check(lines, "all-reduce MIN", dtype, c.allReduce(x, ReduceOp.MIN, m), min, 0);
        check(lines, "all-reduce AVG", dtype, c.allReduce(x, ReduceOp.AVG, m), avg, avgTolerance);
        NDArray inPlace = x.duplicate();
        c.allReduceInPlace(inPlace, ReduceOp.SUM);
        check(lines, "all-reduce in place SUM", dtype, inPlace, sum, 0);

        double[] g0 = new double[n * world];
        double[] g1 = new double[n * world];
        for (int r = 0; r < world; r++) {
            for (int row = 0; row < ROWS; row++) {
                for (int col = 0; col < COLS; col++) {
                    int i = row * COLS + col;
                    g0[(r * ROWS + row) * COLS + col] = value(r, i);
                    g1[row * COLS * world + r * COLS + col] = value(r, i);
                }
            }
        }
        NDArray gathered0 = c.allGather(x, 0, m);
        assertEquals(new Shape(ROWS * world, COLS), gathered0.getShape());
        check(lines, "all-gather dim 0", dtype, gathered0, g0, 0);
        NDArray gathered1 = c.allGather(x, -1, m);
        assertEquals(new Shape(ROWS, COLS * world), gathered1.getShape());
        check(lines, "all-gather dim 1", dtype, gathered1, g1, 0);
        check(lines, "started all-gather dim 0", dtype, c.startAllGather(x, m).await(), g0, 0);

        // reduce-scatter a (2w x 2w) contribution: rows 2me..2me+1 (SUM) and columns 2me..2me+1 (AVG)
        int side = 2 * world;
        NDArray square = contribution(m, me, dtype, side, side);
        double[] rowsSum = new double[2 * side];
        double[] colsAvg = new double[side * 2];
        for (int a = 0; a < 2; a++) {
            for (int b = 0; b < side; b++) {
                double s = 0;
                double t = 0;
                for (int r = 0; r < world; r++) {
                    s += value(r, (2 * me + a) * side + b);
                    t += value(r, b * side + 2 * me + a);
                }
                rowsSum[a * side + b] = s;
                colsAvg[b * 2 + a] = floating ? t / world : (long) (t / world);
            }
        }
        NDArray scatteredRows = c.reduceScatter(square, 0, ReduceOp.SUM, m);
        assertEquals(new Shape(2, side), scatteredRows.getShape());
        check(lines, "reduce-scatter SUM dim 0", dtype, scatteredRows, rowsSum, 0);
        NDArray scatteredCols = c.reduceScatter(square, 1, ReduceOp.AVG, m);
        assertEquals(new Shape(side, 2), scatteredCols.getShape());
        check(lines, "reduce-scatter AVG dim 1", dtype, scatteredCols, colsAvg, avgTolerance);

        double[] last = new double[n];
        for (int i = 0; i < n; i++) {
            last[i] = value(world - 1, i);
        }
        check(lines, "broadcast from last", dtype, c.broadcast(x, world - 1, m), last, 0);

        // uneven all-to-all: rank s sends (s + j) % 3 rows of [100s + j, -(100s + j)] to rank j
        long[] send = new long[world];
        long[] recv = new long[world];
        for (int j = 0; j < world; j++) {
            send[j] = (me + j) % 3;
            recv[j] = (j + me) % 3;
        }
        List<Double> rowsOut = new ArrayList<>();
        for (int j = 0; j < world; j++) {
            for (int row = 0; row < send[j]; row++) {
                rowsOut.add(100.0 * me + j);
                rowsOut.add(-(100.0 * me + j));
            }
        }
        List<Double> rowsIn = new ArrayList<>();
        for (int s = 0; s < world; s++) {
            for (int row = 0; row < recv[s]; row++) {
                rowsIn.add(100.0 * s + me);
                rowsIn.add(-(100.0 * s + me));
            }
        }
        NDArray sendRows = DataTypes.toType(m.create(rowsOut.stream().mapToDouble(Double::doubleValue).toArray(),
                new Shape(rowsOut.size() / 2, 2)), dtype, false);
        NDArray received = c.allToAll(sendRows, send, recv, m);
        assertEquals(new Shape(rowsIn.size() / 2, 2), received.getShape());
        // bfloat16 keeps 8 significant bits: 100s + j above 256 moves to an even neighbour
        check(lines, "all-to-all", dtype, received, rowsIn.stream().mapToDouble(Double::doubleValue).toArray(),
                dtype == DataType.BFLOAT16 ? 2 : 0);

        if (floating) {
            // values whose sum depends on the order of additions: the digests show rank-order accumulation
            double[] inexact = new double[n];
            double[] inexactSum = new double[n];
            for (int i = 0; i < n; i++) {
                inexact[i] = (me + 1) * 0.1 + i / 3.0 + 1e-3 * me * i;
                for (int r = 0; r < world; r++) {
                    inexactSum[i] += (r + 1) * 0.1 + i / 3.0 + 1e-3 * r * i;
                }
            }
            NDArray y = DataTypes.toType(m.create(inexact, new Shape(ROWS, COLS)), dtype, false);
            double tolerance = dtype == DataType.FLOAT16 ? 0.05 : dtype == DataType.BFLOAT16 ? 0.5 : dtype == DataType.FLOAT32 ? 1e-4 : 1e-12;
            check(lines, "all-reduce SUM inexact", dtype, c.allReduce(y, ReduceOp.SUM, m), inexactSum, tolerance);
            double[] inexactAvg = new double[n];
            for (int i = 0; i < n; i++) {
                inexactAvg[i] = inexactSum[i] / world;
            }
            check(lines, "all-reduce AVG inexact", dtype, c.allReduce(y, ReduceOp.AVG, m), inexactAvg, tolerance);
        }

        // ring send/recv, twice, to check ordering
        int next = (me + 1) % world;
        int prev = (me + world - 1) % world;
        c.send(DataTypes.toType(m.create(new double[] {me, 1}), dtype, false), next);
        c.send(DataTypes.toType(m.create(new double[] {me, 2}), dtype, false), next);
        check(lines, "recv 1", dtype, c.recv(new Shape(2), dtype, prev, m), new double[] {prev, 1}, 0);
        check(lines, "recv 2", dtype, c.recv(new Shape(2), dtype, prev, m), new double[] {prev, 2}, 0);
    }

    /**
     * Sums of the rank over the tensor- and pipeline-parallel groups of a layout, as a line.
     *
     * @param groups this rank's groups
     * @param rank the global rank
     * @param root manager for temporaries
     * @return e.g. {@code groups tp=1.0 pp=2.0 dp=...}
     */
    static String groupSums(ProcessGroups groups, int rank, NDManager root) {
        try (NDManager m = root.newSubManager()) {
            NDArray x = m.create(new float[] {rank});
            return "groups tp=" + groups.tp().allReduce(x, ReduceOp.SUM, m).getFloat()
                    + " pp=" + groups.pp().allReduce(x, ReduceOp.SUM, m).getFloat()
                    + " dp=" + groups.dp().allReduce(x, ReduceOp.SUM, m).getFloat()
                    + " world=" + groups.world().allReduce(x, ReduceOp.MAX, m).getFloat();
        }
    }

    private static void check(List<String> lines, String label, DataType dtype, NDArray actual, double[] expected, double tolerance) {
        String what = label + " " + dtype + " " + actual.getShape();
        assertEquals(dtype, DataTypes.of(actual), what);
        NDArray wide = DataTypes.toType(actual, DataType.FLOAT64, true);
        double[] got = wide.toDoubleArray();
        wide.close();
        assertArrayEquals(expected, got, tolerance, what);
        lines.add(what + " " + digest(actual));
    }

    private static String digest(NDArray a) {
        try {
            MessageDigest sha = MessageDigest.getInstance("SHA-256");
            sha.update(DataTypes.toBytes(a));
            return HexFormat.of().formatHex(sha.digest()).substring(0, 16);
        } catch (NoSuchAlgorithmException e) {
            throw new IllegalStateException(e);
        }
    }
}
