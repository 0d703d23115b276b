package io.mcore4j.optimizer;

import io.mcore4j.core.Precision;

import java.util.Objects;

/**
 * Options of the optimizer and of data-parallel gradient synchronisation, validated once. Build
 * with {@link #builder()}; every option has Megatron-Core's default.
 *
 * @param algorithm the update rule
 * @param lr base learning rate (the training loop passes the scheduled rate to each step)
 * @param beta1 Adam's first-moment decay
 * @param beta2 Adam's second-moment decay
 * @param eps Adam's denominator term
 * @param weightDecay base weight decay (1-D parameters, i.e. biases and norm weights, never decay)
 * @param sgdMomentum SGD momentum (0 = plain SGD)
 * @param clipGrad maximum global L2 norm of the gradients; 0 turns clipping off
 * @param fp16 whether model parameters are float16 (fp32 master weights and dynamic loss scaling)
 * @param bf16 whether model parameters are bfloat16 (fp32 master weights and optimizer state, no loss
 *     scaling); exclusive with {@code fp16}
 * @param initialLossScale first loss scale when {@code fp16}
 * @param minLossScale the scale never backs off below this
 * @param lossScaleWindow steps without inf/NaN after which the scale doubles (growth interval)
 * @param hysteresis number of inf/NaN steps tolerated before the scale halves
 * @param useDistributedOptimizer shard master weights and optimizer moments over data-parallel ranks (ZeRO-1)
 * @param bucketSizeBytes target size of one gradient bucket, in bytes of the reduction dtype
 * @param averageInCollective average with an AVG collective instead of pre-dividing by the group size and summing
 * @param gradReduceInFp32 reduce gradients in float32 even when parameters are float16 or bfloat16
 *     (Megatron's {@code --accumulate-allreduce-grads-in-fp32}; on by default here)
 * @param countZerosInGrad count zero gradient elements at each step ({@link StepResult#numZeros()}), one extra reduction
 * @param fusedAdam run Adam/AdamW through libtorch's fused kernel (one pass over each bucket instead of
 *     about a dozen), by way of a TorchScript module mcore4j ships; same state and checkpoints
 * @param overlapGradReduce start each gradient bucket's data-parallel reduction during the step's last
 *     backward, as soon as the model reports its parameters' gradients complete (Megatron's
 *     {@code --overlap-grad-reduce}); see {@link DistributedDataParallel#expectBackwardPasses}
 * @param overlapParamGather with the distributed optimizer, start each bucket's all-gather of the
 *     updated parameters at the end of the step and wait for it only when the next forward is about to
 *     read a parameter of that bucket (Megatron's {@code --overlap-param-gather}); see
 *     {@link MegatronOptimizer#beforeForward}. Needs {@code useDistributedOptimizer}
 * @param optimizerCpuOffload hold part of this rank's optimizer state (fp32 master weights and
 *     moments) on the host and step it there (Megatron's {@code --optimizer-cpu-offload}, its hybrid
 *     device optimizer): each step copies those gradients to the host, updates there and copies the
 *     new parameters back. Same values and same checkpoints as without it. Needs Adam with decoupled
 *     weight decay (ADAMW) or SGD, as Megatron-Core's hybrid optimizer does
 * @param optimizerOffloadFraction the share of this rank's optimizer state elements held on the host
 *     under {@code optimizerCpuOffload}, in (0, 1] (Megatron's {@code --optimizer-offload-fraction},
 *     default 1.0); which state goes is {@link HostPlacement}'s rule
 * @param dataParallelShardingStrategy what data parallelism shards beyond the distributed optimizer
 *     (Megatron FSDP's {@code --data-parallel-sharding-strategy}, default {@code no_shard}): every value
 *     but {@code NO_SHARD} needs {@code useDistributedOptimizer}; {@code OPTIM_GRADS} also shards the
 *     gradients (see {@link DataParallelShardingStrategy})
 */
public record OptimizerConfig(Algorithm algorithm, double lr, double beta1, double beta2, double eps,
                              double weightDecay, double sgdMomentum, double clipGrad, boolean fp16, boolean bf16,
                              double initialLossScale, double minLossScale, int lossScaleWindow, int hysteresis,
                              boolean useDistributedOptimizer, long bucketSizeBytes, boolean averageInCollective,
                              boolean gradReduceInFp32, boolean countZerosInGrad, boolean fusedAdam, boolean overlapGradReduce,
                              boolean overlapParamGather, boolean optimizerCpuOffload, double optimizerOffloadFraction,
                              DataParallelShardingStrategy dataParallelShardingStrategy) {

    /** The update rule. */
    public enum Algorithm {
        /** Adam with L2 regularisation added to the gradient (torch.optim.Adam). */
        ADAM,
        /** Adam with decoupled weight decay (torch.optim.AdamW; Megatron's default "adam"). */
        ADAMW,
        /** Stochastic gradient descent with optional momentum (torch.optim.SGD, no dampening). */
        SGD
    }

    /**
     * Validates every option.
     *
     * @throws IllegalArgumentException naming the option, its value and the accepted range
     */
    public OptimizerConfig {
        Objects.requireNonNull(algorithm, "algorithm");
        atLeast("learning rate", lr, 0);
        unitInterval("beta1", beta1);
        unitInterval("beta2", beta2);
        if (!(eps > 0)) {
            throw new IllegalArgumentException("eps " + eps + " must be > 0");
        }
        atLeast("weight decay", weightDecay, 0);
        unitInterval("SGD momentum", sgdMomentum);
        atLeast("gradient clipping norm", clipGrad, 0);
        Precision.of(fp16, bf16); // refuses both
        if (!(initialLossScale > 0) || Double.isInfinite(initialLossScale)) {
            throw new IllegalArgumentException("initial loss scale " + initialLossScale + " must be finite and > 0");
        }
        if (!(minLossScale > 0) || minLossScale > initialLossScale) {
            throw new IllegalArgumentException("minimum loss scale " + minLossScale
                    + " must be > 0 and at most the initial loss scale " + initialLossScale);
        }
        if (lossScaleWindow < 1) {
            throw new IllegalArgumentException("loss scale window " + lossScaleWindow + " must be >= 1");
        }
        if (hysteresis < 1) {
            throw new IllegalArgumentException("hysteresis " + hysteresis + " must be >= 1");
        }
        if (bucketSizeBytes < 1) {
            throw new IllegalArgumentException("bucket size " + bucketSizeBytes + " bytes must be >= 1");
        }
        if (!(optimizerOffloadFraction > 0 && optimizerOffloadFraction <= 1)) {
            throw new IllegalArgumentException("optimizer offload fraction " + optimizerOffloadFraction
                    + " must be in (0, 1]");
        }
        if (overlapParamGather && !useDistributedOptimizer) {
            throw new IllegalArgumentException("overlapping the parameter all-gather (overlapParamGather=true) needs the"
                    + " distributed optimizer, which is off (useDistributedOptimizer=false): without it every rank"
                    + " updates all its parameters and nothing is gathered");
        }
        Objects.requireNonNull(dataParallelShardingStrategy, "dataParallelShardingStrategy");
        if (dataParallelShardingStrategy.shardsOptimizerState() && !useDistributedOptimizer) {
            throw new IllegalArgumentException("data-parallel sharding strategy " + dataParallelShardingStrategy.flag()
                    + " shards the optimizer state: it needs the distributed optimizer (useDistributedOptimizer=true)");
        }
        if (optimizerCpuOffload && algorithm == Algorithm.ADAM) {
            throw new IllegalArgumentException("optimizer CPU offload needs decoupled weight decay (ADAMW), as in"
                    + " Megatron-Core; the algorithm is ADAM");
        }
    }

    /**
     * @return the training precision these flags select
     */
    public Precision precision() {
        return Precision.of(fp16, bf16);
    }

    private static void atLeast(String what, double value, double min) {
        if (!(value >= min) || Double.isInfinite(value)) {
            throw new IllegalArgumentException(what + " " + value + " must be finite and >= " + min);
        }
    }

    private static void unitInterval(String what, double value) {
        if (!(value >= 0 && value < 1)) {
            throw new IllegalArgumentException(what + " " + value + " must be in [0, 1)");
        }
    }

    /**
     * A builder holding the defaults: AdamW, lr 1e-3, betas (0.9, 0.999), eps 1e-8, weight decay
     * 0.01, SGD momentum 0.9, clipping at 1.0, fp32, loss scale 2^16 (min 1, window 1000,
     * hysteresis 2), no distributed optimizer, 40 MB buckets, pre-divided sums, fp32 reduction, no
     * CPU offload (offload fraction 1.0 once it is on), sharding strategy {@code no_shard}.
     *
     * @return a new builder
     */
    public static Builder builder() {
        return new Builder();
    }

    /**
     * A builder initialised from this configuration.
     *
     * @return a new builder
     */
    public Builder toBuilder() {
        return new Builder().algorithm(algorithm).lr(lr).beta1(beta1).beta2(beta2).eps(eps).weightDecay(weightDecay)
                .sgdMomentum(sgdMomentum).clipGrad(clipGrad).fp16(fp16).bf16(bf16).initialLossScale(initialLossScale)
                .minLossScale(minLossScale).lossScaleWindow(lossScaleWindow).hysteresis(hysteresis)
                .useDistributedOptimizer(useDistributedOptimizer).bucketSizeBytes(bucketSizeBytes)
                .averageInCollective(averageInCollective).gradReduceInFp32(gradReduceInFp32)
                .countZerosInGrad(countZerosInGrad).fusedAdam(fusedAdam).overlapGradReduce(overlapGradReduce)
                .overlapParamGather(overlapParamGather).optimizerCpuOffload(optimizerCpuOffload).optimizerOffloadFraction(optimizerOffloadFraction)
                .dataParallelShardingStrategy(dataParallelShardingStrategy);
    }

    /** Mutable builder; {@link #build()} validates. */
    public static final class Builder {
        private Algorithm algorithm = Algorithm.ADAMW;
        private double lr = 1e-3;
        private double beta1 = 0.9;
        private double beta2 = 0.999;
        private double eps = 1e-8;
        private double weightDecay = 0.01;
        private double sgdMomentum = 0.9;
        private double clipGrad = 1.0;
        private boolean fp16;
        private boolean bf16;
        private double initialLossScale = 65536;
        private double minLossScale = 1;
        private int lossScaleWindow = 1000;
        private int hysteresis = 2;
        private boolean useDistributedOptimizer;
        private long bucketSizeBytes = 40_000_000L;
        private boolean averageInCollective;
        private boolean gradReduceInFp32 = true;
        private boolean countZerosInGrad;
        private boolean fusedAdam;
        private boolean overlapGradReduce;
        private boolean overlapParamGather;
        private boolean optimizerCpuOffload;
        private double optimizerOffloadFraction = 1.0;
        private DataParallelShardingStrategy dataParallelShardingStrategy = DataParallelShardingStrategy.NO_SHARD;

        private Builder() {}

        /**
         * @param v what data parallelism shards (default {@code NO_SHARD}); every other value needs
         *     {@link #useDistributedOptimizer}
         * @return this
         */
        public Builder dataParallelShardingStrategy(DataParallelShardingStrategy v) {
            dataParallelShardingStrategy = v;
            return this;
        }

        /** @param v hold part of the optimizer state on the host and step it there (default false) @return this */
        public Builder optimizerCpuOffload(boolean v) {
            optimizerCpuOffload = v;
            return this;
        }

        /** @param v share of the optimizer state on the host under CPU offload, in (0, 1] (default 1.0) @return this */
        public Builder optimizerOffloadFraction(double v) {
            optimizerOffloadFraction = v;
            return this;
        }

        /** @param v use the fused Adam kernel (default false) @return this */
        public Builder fusedAdam(boolean v) {
            fusedAdam = v;
            return this;
        }

        /** @param v start bucket reductions during the last backward of a step @return this */
        public Builder overlapGradReduce(boolean v) {
            overlapGradReduce = v;
            return this;
        }

        /**
         * @param v start the distributed optimizer's parameter all-gathers after the step and wait for each
         *     bucket just before the next forward reads it (default false; needs the distributed optimizer)
         * @return this
         */
        public Builder overlapParamGather(boolean v) {
            overlapParamGather = v;
            return this;
        }

        /** @param v the update rule @return this */
        public Builder algorithm(Algorithm v) {
            algorithm = v;
            return this;
        }

        /** @param v base learning rate @return this */
        public Builder lr(double v) {
            lr = v;
            return this;
        }

        /** @param v Adam beta1 @return this */
        public Builder beta1(double v) {
            beta1 = v;
            return this;
        }

        /** @param v Adam beta2 @return this */
        public Builder beta2(double v) {
            beta2 = v;
            return this;
        }

        /** @param v Adam eps @return this */
        public Builder eps(double v) {
            eps = v;
            return this;
        }

        /** @param v base weight decay @return this */
        public Builder weightDecay(double v) {
            weightDecay = v;
            return this;
        }

        /** @param v SGD momentum @return this */
        public Builder sgdMomentum(double v) {
            sgdMomentum = v;
            return this;
        }

        /** @param v maximum global gradient norm, 0 = no clipping @return this */
        public Builder clipGrad(double v) {
            clipGrad = v;
            return this;
        }

        /** @param v float16 parameters with loss scaling @return this */
        public Builder fp16(boolean v) {
            fp16 = v;
            return this;
        }

        /** @param v bfloat16 parameters: fp32 master weights and optimizer state, no loss scaling @return this */
        public Builder bf16(boolean v) {
            bf16 = v;
            return this;
        }

        /**
         * Sets {@code fp16} and {@code bf16} from a precision.
         *
         * @param p the training precision
         * @return this
         */
        public Builder precision(Precision p) {
            fp16 = p == Precision.FP16;
            bf16 = p == Precision.BF16;
            return this;
        }

        /** @param v initial loss scale @return this */
        public Builder initialLossScale(double v) {
            initialLossScale = v;
            return this;
        }

        /** @param v minimum loss scale @return this */
        public Builder minLossScale(double v) {
            minLossScale = v;
            return this;
        }

        /** @param v growth interval in clean steps @return this */
        public Builder lossScaleWindow(int v) {
            lossScaleWindow = v;
            return this;
        }

        /** @param v inf/NaN steps tolerated before backing off @return this */
        public Builder hysteresis(int v) {
            hysteresis = v;
            return this;
        }

        /** @param v shard optimizer state over data-parallel ranks @return this */
        public Builder useDistributedOptimizer(boolean v) {
            useDistributedOptimizer = v;
            return this;
        }

        /** @param v target gradient bucket size in bytes @return this */
        public Builder bucketSizeBytes(long v) {
            bucketSizeBytes = v;
            return this;
        }

        /** @param v average in the collective instead of pre-dividing @return this */
        public Builder averageInCollective(boolean v) {
            averageInCollective = v;
            return this;
        }

        /** @param v reduce float16 gradients in float32 @return this */
        public Builder gradReduceInFp32(boolean v) {
            gradReduceInFp32 = v;
            return this;
        }

        /** @param v count zero gradient elements each step @return this */
        public Builder countZerosInGrad(boolean v) {
            countZerosInGrad = v;
            return this;
        }

        /**
         * Validates and builds.
         *
         * @return the configuration
         * @throws IllegalArgumentException if an option is out of range
         */
        public OptimizerConfig build() {
            return new OptimizerConfig(algorithm, lr, beta1, beta2, eps, weightDecay, sgdMomentum, clipGrad, fp16, bf16,
                    initialLossScale, minLossScale, lossScaleWindow, hysteresis, useDistributedOptimizer,
                    bucketSizeBytes, averageInCollective, gradReduceInFp32, countZerosInGrad, fusedAdam, overlapGradReduce,
                    overlapParamGather, optimizerCpuOffload, optimizerOffloadFraction, dataParallelShardingStrategy);
        }
    }
}
