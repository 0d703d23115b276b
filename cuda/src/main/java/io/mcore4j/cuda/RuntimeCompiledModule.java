package io.mcore4j.cuda;

import static org.bytedeco.cuda.global.cudart.CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR;
import static org.bytedeco.cuda.global.cudart.CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR;
import static org.bytedeco.cuda.global.cudart.CUDA_SUCCESS;
import static org.bytedeco.cuda.global.cudart.cuDeviceGetAttribute;
import static org.bytedeco.cuda.global.cudart.cuLaunchKernel;
import static org.bytedeco.cuda.global.cudart.cuModuleGetFunction;
import static org.bytedeco.cuda.global.cudart.cuModuleLoadData;
import static org.bytedeco.cuda.global.cudart.cudaGetErrorString;
import static org.bytedeco.cuda.global.cudart.cudaSetDevice;
import static org.bytedeco.cuda.global.cudart.cudaSuccess;
import static org.bytedeco.cuda.global.nvrtc.NVRTC_SUCCESS;
import static org.bytedeco.cuda.global.nvrtc.nvrtcCompileProgram;
import static org.bytedeco.cuda.global.nvrtc.nvrtcCreateProgram;
import static org.bytedeco.cuda.global.nvrtc.nvrtcDestroyProgram;
import static org.bytedeco.cuda.global.nvrtc.nvrtcGetCUBIN;
import static org.bytedeco.cuda.global.nvrtc.nvrtcGetCUBINSize;
import static org.bytedeco.cuda.global.nvrtc.nvrtcGetErrorString;
import static org.bytedeco.cuda.global.nvrtc.nvrtcGetProgramLog;
import static org.bytedeco.cuda.global.nvrtc.nvrtcGetProgramLogSize;

import java.io.IOException;
import java.io.InputStream;
import java.io.UncheckedIOException;
import java.nio.charset.StandardCharsets;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import java.util.concurrent.ConcurrentHashMap;

import org.bytedeco.cuda.cudart.CUfunc_st;
import org.bytedeco.cuda.cudart.CUmod_st;
import org.bytedeco.cuda.cudart.CUstream_st;
import org.bytedeco.cuda.nvrtc._nvrtcProgram;
import org.bytedeco.javacpp.BytePointer;
import org.bytedeco.javacpp.LongPointer;
import org.bytedeco.javacpp.Pointer;
import org.bytedeco.javacpp.PointerPointer;
import org.bytedeco.javacpp.SizeTPointer;

/**
 * A CUDA C source of ours compiled by NVRTC into a cubin for one device's architecture and loaded
 * into that device's primary context (the one libtorch uses): its {@code extern "C"} kernels by
 * name, launched on the calling thread's {@link CurrentStream}. A source is compiled once per device and process
 * ({@link #load}): the loaded module is immutable code that stays loaded for the life of the process
 * (the driver unloads it with the context), so every user shares it.
 */
final class RuntimeCompiledModule {
    /** The header every source may include, and the name it includes it by ({@code #include "mcore4j_cuda.cuh"}). */
    private static final String HEADER_NAME = "mcore4j_cuda.cuh";
    private static final String HEADER = "/io/mcore4j/cuda/" + HEADER_NAME;
    /** Loaded modules by device index and resource; compiled code, never changed once loaded. */
    private static final Map<String, RuntimeCompiledModule> LOADED = new ConcurrentHashMap<>();

    private final int device;
    private final String source;
    private final CUmod_st module;
    private final Map<String, CUfunc_st> functions = new HashMap<>();

    private RuntimeCompiledModule(int device, String source, CUmod_st module) {
        this.device = device;
        this.source = source;
        this.module = module;
    }

    /**
     * The module of a source resource for {@code device}, compiled and loaded on first use.
     *
     * @param device CUDA device index
     * @param resource absolute resource path of the CUDA C source
     * @return the loaded module
     * @throws IllegalStateException as {@link #compile}
     */
    static RuntimeCompiledModule load(int device, String resource) {
        return LOADED.computeIfAbsent(device + ":" + resource, key -> compile(device, resource));
    }

    /**
     * Compiles a source resource for {@code device} and loads it.
     *
     * @param device CUDA device index
     * @param resource absolute resource path of the CUDA C source
     * @return the loaded module
     * @throws IllegalStateException if the resource is missing, compilation fails (with NVRTC's log)
     *     or the driver refuses the cubin
     */
    static RuntimeCompiledModule compile(int device, String resource) {
        BytePointer cubin = cubin(resource, computeCapability(device));
        try {
            CUmod_st module = new CUmod_st();
            checkDriver(cuModuleLoadData(module, cubin), "cuModuleLoadData(" + resource + ")");
            return new RuntimeCompiledModule(device, resource, module);
        } finally {
            cubin.close();
        }
    }

    /**
     * Compiles a source resource for an architecture with NVRTC alone: no device, no driver (so a machine without
     * a GPU can check that a source compiles).
     *
     * @param resource absolute resource path of the CUDA C source
     * @param computeCapability the target's major * 10 + minor, e.g. 90
     * @return the cubin, which the caller closes
     * @throws IllegalStateException if the resource is missing or compilation fails (with NVRTC's log)
     */
    static BytePointer cubin(String resource, int computeCapability) {
        // the one header our sources include, put in place of its #include (NVRTC sees one source)
        String source = read(resource).replace("#include \"" + HEADER_NAME + "\"", read(HEADER));
        String arch = "--gpu-architecture=sm_" + computeCapability;
        _nvrtcProgram program = new _nvrtcProgram();
        checkNvrtc(nvrtcCreateProgram(program, new BytePointer(source, StandardCharsets.UTF_8),
                new BytePointer(resource), 0, (PointerPointer<?>) null, (PointerPointer<?>) null), "nvrtcCreateProgram", resource);
        try {
            List<String> options = List.of(arch, "--std=c++17", "-default-device");
            PointerPointer<BytePointer> opts = new PointerPointer<>(options.size());
            for (int i = 0; i < options.size(); i++) {
                opts.put(i, new BytePointer(options.get(i)));
            }
            int r = nvrtcCompileProgram(program, options.size(), opts);
            if (r != NVRTC_SUCCESS) {
                throw new IllegalStateException("NVRTC could not compile " + resource + " for " + arch + ": "
                        + nvrtcGetErrorString(r).getString() + "\n" + log(program));
            }
            SizeTPointer size = new SizeTPointer(1);
            checkNvrtc(nvrtcGetCUBINSize(program, size), "nvrtcGetCUBINSize", resource);
            BytePointer cubin = new BytePointer(size.get());
            checkNvrtc(nvrtcGetCUBIN(program, cubin), "nvrtcGetCUBIN", resource);
            return cubin;
        } finally {
            nvrtcDestroyProgram(program);
        }
    }

    /**
     * @param device CUDA device index
     * @return its compute capability as major * 10 + minor, e.g. 90 for an H100
     * @throws IllegalStateException if the driver cannot tell
     */
    static int computeCapability(int device) {
        check(cudaSetDevice(device), "cudaSetDevice(" + device + ")");
        int[] major = new int[1];
        int[] minor = new int[1];
        checkDriver(cuDeviceGetAttribute(major, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR, device), "cuDeviceGetAttribute");
        checkDriver(cuDeviceGetAttribute(minor, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR, device), "cuDeviceGetAttribute");
        return major[0] * 10 + minor[0];
    }

    /**
     * Launches {@code kernel} with one-dimensional blocks on the thread's {@link CurrentStream}.
     *
     * @param kernel an {@code extern "C"} kernel of the source
     * @param blocks grid size, >= 1
     * @param threads threads per block
     * @param args one pointer per kernel parameter, each at memory holding that parameter's value
     * @throws IllegalStateException if the kernel does not exist or the launch fails
     */
    void launch(String kernel, long blocks, int threads, Pointer... args) {
        launch2d(kernel, blocks, 1, threads, args);
    }

    /**
     * Launches {@code kernel} on a two-dimensional grid of one-dimensional blocks on the thread's {@link CurrentStream}.
     *
     * @param kernel an {@code extern "C"} kernel of the source
     * @param blocksX grid size along x, in [1, 2^31)
     * @param blocksY grid size along y, in [1, 65536)
     * @param threads threads per block
     * @param args one pointer per kernel parameter, each at memory holding that parameter's value
     * @throws IllegalStateException if the kernel does not exist or the launch fails
     */
    void launch2d(String kernel, long blocksX, long blocksY, int threads, Pointer... args) {
        launchOn(CurrentStream.get(), kernel, blocksX, blocksY, threads, args);
    }

    /**
     * {@link #launch2d} on a stream of the caller's choosing.
     *
     * @param stream the stream (null: the legacy default stream)
     * @param kernel an {@code extern "C"} kernel of the source
     * @param blocksX grid size along x, in [1, 2^31)
     * @param blocksY grid size along y, in [1, 65536)
     * @param threads threads per block
     * @param args one pointer per kernel parameter, each at memory holding that parameter's value
     * @throws IllegalStateException if the kernel does not exist or the launch fails
     */
    void launchOn(CUstream_st stream, String kernel, long blocksX, long blocksY, int threads, Pointer... args) {
        long blocks = blocksX;
        if (blocksX < 1 || blocksX > Integer.MAX_VALUE || blocksY < 1 || blocksY > 65535) {
            throw new IllegalArgumentException("grid of " + blocksX + " x " + blocksY + " blocks for " + kernel
                    + " is outside [1, 2^31) x [1, 65536)");
        }
        check(cudaSetDevice(device), "cudaSetDevice(" + device + ")");
        CUfunc_st f;
        synchronized (functions) {
            f = functions.computeIfAbsent(kernel, this::function);
        }
        PointerPointer<Pointer> params = new PointerPointer<>(args);
        checkDriver(cuLaunchKernel(f, (int) blocks, (int) blocksY, 1, threads, 1, 1, 0, stream, params, null),
                "cuLaunchKernel(" + kernel + ")");
    }

    /**
     * A kernel argument of C type {@code long long} (or a device address), for {@link #launch}; the
     * caller closes it after the launch, which has copied the value.
     *
     * @param value the value
     * @return memory holding it
     */
    static LongPointer longArg(long value) {
        LongPointer p = new LongPointer(1);
        p.put(value);
        return p;
    }

    private CUfunc_st function(String name) {
        CUfunc_st f = new CUfunc_st();
        checkDriver(cuModuleGetFunction(f, module, name), "cuModuleGetFunction(" + name + ") in " + source);
        return f;
    }

    private static String log(_nvrtcProgram program) {
        SizeTPointer size = new SizeTPointer(1);
        if (nvrtcGetProgramLogSize(program, size) != NVRTC_SUCCESS || size.get() <= 1) {
            return "(no log)";
        }
        BytePointer text = new BytePointer(size.get());
        nvrtcGetProgramLog(program, text);
        return text.getString();
    }

    private static String read(String resource) {
        try (InputStream in = RuntimeCompiledModule.class.getResourceAsStream(resource)) {
            if (in == null) {
                throw new IllegalStateException("CUDA source " + resource + " is not on the class path");
            }
            return new String(in.readAllBytes(), StandardCharsets.UTF_8);
        } catch (IOException e) {
            throw new UncheckedIOException("cannot read CUDA source " + resource, e);
        }
    }

    /**
     * @param r a CUDA runtime call's result
     * @param what the call, for the message
     * @throws IllegalStateException naming the call and CUDA's error string unless {@code r} is {@code cudaSuccess}
     */
    static void check(int r, String what) {
        if (r != cudaSuccess) {
            throw new IllegalStateException(what + " failed: " + cudaGetErrorString(r).getString());
        }
    }

    private static void checkDriver(int r, String what) {
        if (r != CUDA_SUCCESS) {
            throw new IllegalStateException(what + " failed: CUDA driver error " + r);
        }
    }

    private static void checkNvrtc(int r, String what, String resource) {
        if (r != NVRTC_SUCCESS) {
            throw new IllegalStateException(what + " for " + resource + " failed: " + nvrtcGetErrorString(r).getString());
        }
    }
}
