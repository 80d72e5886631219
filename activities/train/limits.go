package train

import (
	"github.com/retrain-ml/retrain/dags"
	"github.com/retrain-ml/retrain/errtype"
	"github.com/retrain-ml/retrain/nodetype"
)

// A train node's ranks per host and hosts are bounded by what the worker's
// operator allows (Trainers.Limits): a param that sets processes to 30
// must not start 30 ranks on each host, nor hosts to 50 take a lease on
// every host of the queue. The validator refuses such a block when the
// run starts (check, with the params bound), and each worker refuses it
// again before anything moves: a host before it leases for a gang, a run
// before it downloads the data.

// check is the train node's Check: checkTrain's rules and t's limits.
func (t *Trainers) check(with map[string]any) error {
	if err := checkTrain(with); err != nil {
		return err
	}
	procs, why, ok := blockProcesses(with)
	if !ok {
		procs = 0 // only known at run time: the worker checks it then
	}
	hosts, _ := with["hosts"].(float64)
	return t.Limits.Check(procs, why, int(hosts))
}

// blockProcesses is the number of ranks per host a `with` block asks for,
// as processCount counts them, and how it came to be when processes is not
// written; ok is false while a value it depends on is a ${...}.
func blockProcesses(with map[string]any) (n int, why string, ok bool) {
	if dags.HasRef(with["processes"]) {
		return 0, "", false
	}
	if p, isNum := with["processes"].(float64); isNum && p > 0 {
		return int(p), "", true
	}
	gpus, isNum := with["gpus"].(float64)
	if !isNum || gpus <= 0 {
		return 1, "", !dags.HasRef(with["gpus"])
	}
	var argv []string
	switch a := with["argv"].(type) {
	case []string:
		argv = a
	case []any:
		for _, w := range a {
			s, isStr := w.(string)
			if !isStr || dags.HasRef(s) {
				return 0, "", false
			}
			argv = append(argv, s)
		}
	}
	if launchesRanks(argv) {
		return 1, "", true
	}
	return int(gpus), "one per GPU", true
}

// checkLimits refuses, on this worker, a node that asks for more ranks
// per host or hosts than it allows; host names this worker when it
// refuses as a gang's host.
func (t *Trainers) checkLimits(processes int, why string, hosts int) error {
	if err := t.Limits.Check(processes, why, hosts); err != nil {
		if t.Host.ID != "" && hosts > 1 {
			return nodetype.Permanent(errtype.OverLimit, "host %s refuses the gang: %v", t.Host.ID, err)
		}
		return nodetype.Permanent(errtype.OverLimit, "%v", err)
	}
	return nil
}

// processWhy says how processCount came to w's number when processes is
// not written, for the limit's message.
func processWhy(w With) string {
	if w.Processes <= 0 && w.GPUs > 0 && !launchesRanks(w.Argv) {
		return "one per GPU"
	}
	return ""
}
