/**
 * Device kernels that mcore4j's CPU-only modules can use without depending on CUDA: each is an
 * interface here whose implementation lives in the CUDA artifact ({@code mcore4j-cuda}) and is
 * found with {@link java.util.ServiceLoader} when that artifact is on the class path.
 */
package io.mcore4j.core.kernel;
