/**
 * Parameters and the minimal module contract shared by layers: a parameter owns its tensor and says
 * how it is partitioned, so optimizers and checkpoints can treat every layer alike.
 */
package io.mcore4j.core.nn;
