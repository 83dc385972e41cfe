// How many threads kvevict's parallel work uses: the runs a command spreads
// over the cores and the weight products' threads all follow OpenMP's
// default for the calling thread (omp_get_max_threads), so one setting
// governs a whole command.
#pragma once

#include <string>

namespace kvevict {

// The cores this process may run on (its CPU affinity), at least 1.
int machine_cores();

// Sets the threads the calling thread's later parallel work uses:
// `requested`, capped at machine_cores() -- more threads than cores only take
// turns; 0 leaves OpenMP's default (every core, or OMP_NUM_THREADS). Returns the
// threads set; when the request was capped, `note` (if given) says so in
// one line. ParameterError for a negative request.
int use_threads(int requested, std::string* note = nullptr);

}  // namespace kvevict
