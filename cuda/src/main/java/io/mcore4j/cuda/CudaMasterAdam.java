package io.mcore4j.cuda;

import static io.mcore4j.cuda.RuntimeCompiledModule.longArg;

import ai.djl.Device;
import ai.djl.ndarray.NDArray;
import ai.djl.ndarray.NDManager;
import ai.djl.ndarray.types.DataType;
import ai.djl.ndarray.types.Shape;
import io.mcore4j.core.DataTypes;
import io.mcore4j.core.Tensors;
import io.mcore4j.core.kernel.MasterAdamKernel;

import java.nio.ByteBuffer;
import java.nio.ByteOrder;
import java.util.ArrayList;
import java.util.List;

import org.bytedeco.javacpp.BytePointer;
import org.bytedeco.javacpp.FloatPointer;
import org.bytedeco.javacpp.IntPointer;
import org.bytedeco.javacpp.LongPointer;

/**
 * {@link MasterAdamKernel} on CUDA: the kernels of {@code master_adam.cu}, compiled by NVRTC for the
 * device when the optimizer is built. A launch takes up to {@value #MAX_SEGMENTS} parameters of one
 * bucket in a table passed by value (no host-to-device copy), so a step is one statistics launch
 * and one update launch per such group, with no per-parameter launch and no float32 copy of the
 * gradients.
 *
 * <p>Made by {@link CudaKernels} (off with {@code -Dmcore4j.cuda.kernels=false}: the optimizer then
 * composes the step from libtorch's kernels).
 */
public final class CudaMasterAdam implements MasterAdamKernel {
    /** Resource path of the CUDA source. */
    public static final String SOURCE = "/io/mcore4j/cuda/master_adam.cu";

    // must match master_adam.cu
    static final int MAX_SEGMENTS = 64;
    static final int CHUNK = 4096;
    static final int THREADS = 256;
    private static final int SEGMENT_BYTES = 40;
    private static final int TABLE_BYTES = 8 + MAX_SEGMENTS * SEGMENT_BYTES;

    private final RuntimeCompiledModule module;

    CudaMasterAdam(RuntimeCompiledModule module) {
        this.module = module;
    }

    /**
     * One launch: up to MAX_SEGMENTS non-empty segments of one bucket (their indices in the bucket),
     * the blocks they need, and the launch's table with every field but the gradient addresses.
     */
    private record Launch(int bucket, int[] segments, long blocks, byte[] table, String paramCode, long master,
                          long expAvg, long expAvgSq) {}

    @Override
    public Bound bind(List<Bucket> buckets) {
        List<Launch> launches = new ArrayList<>();
        for (int b = 0; b < buckets.size(); b++) {
            Bucket bucket = buckets.get(b);
            long length = bucket.master().size();
            requireFloat32(bucket.master(), "master weights", length);
            requireFloat32(bucket.expAvg(), "exp_avg", length);
            requireFloat32(bucket.expAvgSq(), "exp_avg_sq", length);
            String paramCode = null;
            List<Integer> group = new ArrayList<>();
            for (int i = 0; i < bucket.segments().size(); i++) {
                Segment s = bucket.segments().get(i);
                if (s.offset() + s.numel() > length) {
                    throw new IllegalArgumentException("segment [" + s.offset() + ", " + (s.offset() + s.numel())
                            + ") lies outside the bucket's " + length + " elements");
                }
                if (s.param().size() != s.numel()) {
                    throw new IllegalArgumentException("parameter of shape " + s.param().getShape()
                            + " does not have its segment's " + s.numel() + " elements");
                }
                String code = KernelArgs.floatSuffix(DataTypes.of(s.param()));
                if (paramCode != null && !paramCode.equals(code)) {
                    throw new IllegalArgumentException("parameters of one bucket must share a dtype, got "
                            + paramCode + " and " + code);
                }
                paramCode = code;
                if (s.numel() == 0) {
                    continue;
                }
                if (group.size() == MAX_SEGMENTS) {
                    launches.add(launch(b, bucket, group, paramCode));
                    group = new ArrayList<>();
                }
                group.add(i);
            }
            if (!group.isEmpty()) {
                launches.add(launch(b, bucket, group, paramCode));
            }
        }
        return grads -> new StepGradients(buckets, launches, grads);
    }

    /** A launch's table (master_adam.cu's struct Table, little-endian) with zero gradient addresses. */
    private static Launch launch(int index, Bucket bucket, List<Integer> group, String paramCode) {
        ByteBuffer buf = ByteBuffer.allocate(TABLE_BYTES).order(ByteOrder.LITTLE_ENDIAN);
        buf.putLong(0, group.size());
        long firstBlock = 0;
        int[] segments = new int[group.size()];
        for (int k = 0; k < group.size(); k++) {
            segments[k] = group.get(k);
            Segment s = bucket.segments().get(segments[k]);
            int at = 8 + k * SEGMENT_BYTES;
            buf.putLong(at + 8, DevicePointers.address(s.param()));
            buf.putLong(at + 16, s.numel());
            buf.putLong(at + 24, s.offset());
            buf.putLong(at + 32, firstBlock);
            firstBlock += (s.numel() + CHUNK - 1) / CHUNK;
        }
        // the buffers never move: their addresses are read once here, not at every step
        return new Launch(index, segments, firstBlock, buf.array(), paramCode, DevicePointers.address(bucket.master()),
                DevicePointers.address(bucket.expAvg()), DevicePointers.address(bucket.expAvgSq()));
    }

    /** One step's gradients: the launches' tables completed with their addresses. */
    private final class StepGradients implements Gradients {
        private final List<Bucket> buckets;
        private final List<Launch> launches;
        private final byte[][] tables;
        private final String[] gradCodes;

        StepGradients(List<Bucket> buckets, List<Launch> launches, List<List<NDArray>> grads) {
            if (grads.size() != buckets.size()) {
                throw new IllegalArgumentException(grads.size() + " gradient lists for " + buckets.size() + " buckets");
            }
            for (int b = 0; b < buckets.size(); b++) {
                if (grads.get(b).size() != buckets.get(b).segments().size()) {
                    throw new IllegalArgumentException("bucket " + b + " has " + buckets.get(b).segments().size()
                            + " segments but " + grads.get(b).size() + " gradients");
                }
            }
            this.buckets = buckets;
            this.launches = launches;
            this.tables = new byte[launches.size()][];
            this.gradCodes = new String[launches.size()];
            for (int l = 0; l < launches.size(); l++) {
                Launch launch = launches.get(l);
                ByteBuffer buf = ByteBuffer.wrap(launch.table().clone()).order(ByteOrder.LITTLE_ENDIAN);
                String code = null;
                for (int k = 0; k < launch.segments().length; k++) {
                    Segment s = buckets.get(launch.bucket()).segments().get(launch.segments()[k]);
                    NDArray g = grads.get(launch.bucket()).get(launch.segments()[k]);
                    if (g == null) {
                        continue;
                    }
                    if (g.size() != s.numel()) {
                        throw new IllegalArgumentException("gradient of shape " + g.getShape() + " does not have its segment's "
                                + s.numel() + " elements (bucket " + launch.bucket() + ")");
                    }
                    String c = KernelArgs.floatSuffix(DataTypes.of(g));
                    if (code != null && !code.equals(c)) {
                        throw new IllegalArgumentException("gradients of bucket " + launch.bucket() + " must share a dtype, got "
                                + code + " and " + c);
                    }
                    code = c;
                    buf.putLong(8 + k * SEGMENT_BYTES, DevicePointers.address(g));
                }
                tables[l] = buf.array();
                gradCodes[l] = code == null ? "f32" : code;
            }
        }

        @Override
        public NDArray sumOfSquares(NDManager owner) {
            long total = 0;
            for (Launch l : launches) {
                total += l.blocks();
            }
            Device device = buckets.isEmpty() ? owner.getDevice() : buckets.get(0).master().getDevice();
            if (total == 0) {
                return owner.zeros(new Shape(), DataType.FLOAT64, device);
            }
            try (NDManager temp = owner.newSubManager()) {
                NDArray partials = DataTypes.empty(temp, new Shape(total), DataType.FLOAT64, device);
                long base = DevicePointers.address(partials);
                long first = 0;
                for (int l = 0; l < launches.size(); l++) {
                    Launch launch = launches.get(l);
                    try (BytePointer table = new BytePointer(tables[l]); IntPointer counted = new IntPointer(1);
                         LongPointer out = new LongPointer(1)) {
                        counted.put(buckets.get(launch.bucket()).countsInNorm() ? 1 : 0);
                        out.put(base + 8 * first);
                        module.launch("sum_squares_" + gradCodes[l], launch.blocks(), THREADS, table, counted, out);
                    }
                    first += launch.blocks();
                }
                return Tensors.own(partials.sum(), owner);
            }
        }

        @Override
        public void step(Step step) {
            double biasCorrection1 = 1 - Math.pow(step.beta1(), step.step());
            double biasCorrection2 = 1 - Math.pow(step.beta2(), step.step());
            for (int l = 0; l < launches.size(); l++) {
                Launch launch = launches.get(l);
                Bucket b = buckets.get(launch.bucket());
                String kernel = "adam_" + gradCodes[l] + "_" + launch.paramCode();
                try (BytePointer table = new BytePointer(tables[l]);
                     LongPointer master = longArg(launch.master()); LongPointer expAvg = longArg(launch.expAvg());
                     LongPointer expAvgSq = longArg(launch.expAvgSq());
                     FloatPointer lr = new FloatPointer((float) step.lr());
                     FloatPointer beta1 = new FloatPointer((float) step.beta1());
                     FloatPointer beta2 = new FloatPointer((float) step.beta2());
                     FloatPointer eps = new FloatPointer((float) step.eps());
                     FloatPointer decay = new FloatPointer(b.decays() ? (float) step.weightDecay() : 0f);
                     IntPointer decoupled = new IntPointer(1);
                     FloatPointer stepSize = new FloatPointer((float) (step.lr() / biasCorrection1));
                     FloatPointer correction2Sqrt = new FloatPointer((float) Math.sqrt(biasCorrection2));
                     FloatPointer divisor = new FloatPointer((float) step.gradDivisor())) {
                    decoupled.put(step.decoupled() ? 1 : 0);
                    module.launch(kernel, launch.blocks(), THREADS, table, master, expAvg, expAvgSq, lr, beta1, beta2,
                            eps, decay, decoupled, stepSize, correction2Sqrt, divisor);
                }
            }
        }
    }

    private static void requireFloat32(NDArray t, String what, long length) {
        if (DataTypes.of(t) != DataType.FLOAT32 || t.size() != length) {
            throw new IllegalArgumentException(what + " must be float32 of " + length + " elements, got "
                    + DataTypes.of(t) + " " + t.getShape());
        }
    }
}
