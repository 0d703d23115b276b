/**
 * The NCCL backend: {@link io.mcore4j.parallel.nccl.NcclBackend} runs the
 * {@link io.mcore4j.parallel.Communicator} collectives on DJL CUDA tensors with NCCL (through
 * JavaCPP's CUDA preset), one process per GPU, communicators created by id through the rendezvous
 * store of the TCP backend. This is the only package that loads CUDA; nothing outside it refers to
 * it, so CPU-only users never load a CUDA library.
 */
package io.mcore4j.parallel.nccl;
