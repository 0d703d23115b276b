/**
 * A small local launcher, the torchrun of this project: starts one JVM per rank on this machine
 * with the torchrun environment (RANK, LOCAL_RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT and a
 * fresh job token) and fails the job as soon as any rank fails.
 */
package io.mcore4j.samples.launch;
