package io.mcore4j.cuda;

import ai.djl.Device;
import ai.djl.ndarray.NDArray;
import ai.djl.ndarray.NDArrays;
import ai.djl.ndarray.NDList;
import ai.djl.ndarray.NDManager;
import ai.djl.ndarray.index.NDIndex;
import ai.djl.ndarray.types.DataType;
import ai.djl.ndarray.types.Shape;
import io.mcore4j.core.DataTypes;
import io.mcore4j.core.Tensors;
import io.mcore4j.core.kernel.BucketFillKernel;

import java.util.ArrayList;
import java.util.Arrays;
import java.util.List;

/**
 * The GPU check of {@link CudaBucketFill} (needs a CUDA device; CI has none):
 * {@code java -cp <jars>:<cuda test classes> io.mcore4j.cuda.CudaBucketFillCheck}. Buckets of float32, bfloat16 and
 * float16 filled from sources of every dtype at odd sizes and offsets (vectorised and not), with zero ranges and a
 * segment count past one launch's table, against each value cast to float32, divided there by a host scalar as
 * {@code DistributedDataParallel}'s composed fill divides its float32 buckets (libtorch multiplies by the float32
 * reciprocal) and rounded once to the bucket's dtype: bit for bit. The elements the segments leave out must keep
 * their values. Exits 1 on any failure. Also prints the time per call
 * of both fills for a 1.3B-model bucket (a figure, not a check).
 */
public final class CudaBucketFillCheck {
    private CudaBucketFillCheck() {}

    /** @param args none */
    public static void main(String[] args) {
        Device gpu = Device.gpu();
        GpuCheck check = new GpuCheck("CudaBucketFillCheck");
        try (NDManager m = NDManager.newBaseManager(gpu)) {
            BucketFillKernel kernel = GpuCheck.kernel(BucketFillKernel.class, gpu);
            DataType[] dtypes = {DataType.FLOAT32, DataType.BFLOAT16, DataType.FLOAT16};
            long[][] layouts = {{4096, 12, 3, 1_000_003, 8}, {5, 7, 9}, new long[70]};
            Arrays.fill(layouts[2], 33);
            for (DataType bucketDtype : dtypes) {
                for (DataType sourceDtype : dtypes) {
                    for (long[] sizes : layouts) {
                        for (int divisor : new int[] {1, 3, 4}) {
                            checkOne(check, kernel, m, bucketDtype, sourceDtype, sizes, divisor);
                        }
                    }
                }
            }
            time(check, kernel, m);
        }
        check.exit();
    }

    /**
     * Sources of {@code sizes} elements (every third one missing: zeros) at offsets 1 apart after a 3-element lead the
     * fill must leave alone, and a 5-element zero tail.
     */
    private static void checkOne(GpuCheck check, BucketFillKernel kernel, NDManager m, DataType bucketDtype,
                                 DataType sourceDtype, long[] sizes, int divisor) {
        try (NDManager t = m.newSubManager()) {
            long lead = 3;
            long total = lead;
            for (long n : sizes) {
                total += n + 1;
            }
            total += 5;
            NDArray bucket = DataTypes.toType(t.randomNormal(new Shape(total)), bucketDtype, false);
            NDArray before = DataTypes.toType(bucket, DataType.FLOAT32, true);
            List<BucketFillKernel.Segment> segments = new ArrayList<>();
            NDArray want = before.duplicate();
            float scale = 1f / divisor;
            long offset = lead;
            for (int i = 0; i < sizes.length; i++) {
                long n = sizes[i];
                NDArray source = i % 3 == 2 ? null
                        : DataTypes.toType(t.randomNormal(new Shape(n)).mul(100), sourceDtype, false);
                segments.add(new BucketFillKernel.Segment(source, sourceDtype, offset, n));
                NDArray value = source == null ? t.zeros(new Shape(n))
                        : DataTypes.toType(source, DataType.FLOAT32, false).div(Tensors.hostScalar(divisor, before, t));
                want.set(new NDIndex(offset + ":" + (offset + n)), DataTypes.toType(DataTypes.toType(value, bucketDtype, false), DataType.FLOAT32, false));
                offset += n + 1; // one element between segments: keeps its value
            }
            segments.add(new BucketFillKernel.Segment(null, bucketDtype, total - 5, 5));
            want.set(new NDIndex((total - 5) + ":"), 0f);
            kernel.fill(bucket, bucketDtype, segments, scale);
            String name = sourceDtype + " into " + bucketDtype + ", " + sizes.length + " segments, divisor " + divisor;
            check.expect(DataTypes.toType(bucket, DataType.FLOAT32, false).eq(want).all().getBoolean(), name + ": bit for bit");
        }
    }

    /**
     * A bucket of the 1.3B model's size (40M bfloat16 gradients into float32, divided by 4): the kernel's values
     * against the composed fill's, bit for bit, and both timed.
     */
    private static void time(GpuCheck check, BucketFillKernel kernel, NDManager m) {
        try (NDManager t = m.newSubManager()) {
            List<NDArray> grads = new ArrayList<>();
            List<BucketFillKernel.Segment> segments = new ArrayList<>();
            long offset = 0;
            for (int i = 0; i < 10; i++) {
                long n = 2048L * 2048;
                NDArray g = DataTypes.toType(t.randomNormal(new Shape(n)), DataType.BFLOAT16, false);
                grads.add(g);
                segments.add(new BucketFillKernel.Segment(g, DataType.BFLOAT16, offset, n));
                offset += n;
            }
            long total = offset;
            NDArray bucket = DataTypes.empty(t, new Shape(total), DataType.FLOAT32, t.getDevice());
            kernel.fill(bucket, DataType.FLOAT32, segments, 0.25f);
            NDArray composed = DataTypes.toType(NDArrays.concat(new NDList(grads), 0), DataType.FLOAT32, false)
                    .div(Tensors.hostScalar(4, bucket, t));
            check.expect(bucket.eq(composed).all().getBoolean(), "a 1.3B-model bucket: the composed fill's values");
            GpuCheck.time(t, "fill of " + total + " bfloat16 gradients into float32, divided by 4", 3, 20,
                    temp -> kernel.fill(bucket, DataType.FLOAT32, segments, 0.25f));
            GpuCheck.time(t, "the composed fill (concatenate, cast, divide)", 3, 20, temp -> {
                NDArray joined = NDArrays.concat(new NDList(grads), 0);
                joined.attach(temp);
                Tensors.copyInto(bucket, joined);
                bucket.divi(Tensors.hostScalar(4, bucket, temp));
            });
        }
    }
}
