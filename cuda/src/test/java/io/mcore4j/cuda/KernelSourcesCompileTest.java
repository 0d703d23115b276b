package io.mcore4j.cuda;

import static org.junit.jupiter.api.Assertions.assertTrue;

import org.bytedeco.javacpp.BytePointer;
import org.bytedeco.javacpp.Loader;
import org.junit.jupiter.api.Assumptions;
import org.junit.jupiter.api.BeforeAll;
import org.junit.jupiter.params.ParameterizedTest;
import org.junit.jupiter.params.provider.CsvSource;

/**
 * Every CUDA source of this package compiles with NVRTC for the architectures it is loaded on, without a GPU: a
 * syntax or type error shows here instead of on the GPU host. Needs CUDA 13's {@code libnvrtc.so.13} where the
 * system linker finds it, and the CUDA runtime libraries JavaCPP's NVRTC binding loads with it
 * ({@code scripts/cuda/nvrtc-test-libs.sh DIR} puts NVRTC from its wheel and stand-ins for the runtime in {@code DIR},
 * then {@code LD_LIBRARY_PATH=DIR}); skipped, with that reason, where they cannot be loaded.
 */
class KernelSourcesCompileTest {

    @BeforeAll
    static void nvrtc() {
        try {
            Loader.load(org.bytedeco.cuda.global.nvrtc.class);
        } catch (LinkageError e) {
            Assumptions.abort("NVRTC (libnvrtc.so.13) cannot be loaded here, so the CUDA sources are not compiled"
                    + " (scripts/cuda/nvrtc-test-libs.sh makes a folder for LD_LIBRARY_PATH): " + e);
        }
    }

    @ParameterizedTest(name = "{0} for sm_{1}")
    @CsvSource({
        CudaFp8Cast.SOURCE + ", 89", CudaFp8Cast.SOURCE + ", 90",
        CudaLayerNorm.SOURCE + ", 80", CudaBiasGradients.SOURCE + ", 80", CudaCrossEntropy.SOURCE + ", 80",
        CudaMasterAdam.SOURCE + ", 80", CudaBucketFill.SOURCE + ", 80", CudaQkvGradient.SOURCE + ", 80", SlotSum.SOURCE + ", 80", SlotSum.SOURCE + ", 90"})
    void compiles(String resource, int computeCapability) {
        try (BytePointer cubin = RuntimeCompiledModule.cubin(resource, computeCapability)) {
            assertTrue(cubin.capacity() > 0, resource + " gave an empty cubin");
        }
    }
}
