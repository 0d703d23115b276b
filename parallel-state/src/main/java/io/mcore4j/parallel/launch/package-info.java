/**
 * Reads where this process sits in a multi-process job from its launcher's environment (torchrun,
 * Slurm, Open MPI): {@link io.mcore4j.parallel.launch.LaunchEnvironment} is the value a backend
 * connects with, and {@link io.mcore4j.parallel.launch.SlurmNodeList} expands Slurm's host lists.
 * Nothing here opens a socket.
 */
package io.mcore4j.parallel.launch;
