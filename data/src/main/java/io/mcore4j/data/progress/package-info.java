/** The project's one console progress bar, for interactive terminals (preprocessing and training). */
package io.mcore4j.data.progress;
