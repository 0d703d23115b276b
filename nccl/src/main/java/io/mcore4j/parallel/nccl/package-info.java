/**
 * The NCCL backend: {@link io.mcore4j.parallel.nccl.NcclBackend} runs the
 * {@link io.mcore4j.parallel.Communicator} collectives on DJL CUDA tensors with NCCL (through
 * JavaCPP's CUDA preset), one process per GPU, communicators created by id through the rendezvous
 * store of the TCP backend. Buffers' device addresses come from {@code mcore4j-cuda}'s
 * {@link io.mcore4j.cuda.DevicePointers}. With that artifact's {@code io.mcore4j.cuda}, the only code that
 * loads CUDA; nothing CPU-only refers to it, so CPU-only users never load a CUDA library.
 */
package io.mcore4j.parallel.nccl;
