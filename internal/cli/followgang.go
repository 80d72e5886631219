package cli

import (
	"context"
	"fmt"
	"strings"

	"go.temporal.io/sdk/converter"

	"github.com/retrain-ml/retrain/activities/train"
)

// gangProgress is a train node running across hosts (its TrainGang
// child): while it forms, how many hosts have joined; while it trains,
// rank 0's step and total from host 0's heartbeat, the hosts running,
// and the gang attempt when it was formed again.
func (f *follower) gangProgress(ctx context.Context, node, id, runID string) nodeProgress {
	desc, err := f.c.DescribeWorkflowExecution(ctx, id, runID)
	if err != nil {
		return nodeProgress{}
	}
	var (
		p        nodeProgress
		running  int
		joining  int
		hostText []string
	)
	for _, pa := range desc.GetPendingActivities() {
		switch pa.GetActivityType().GetName() {
		case train.GangLeaseActivity:
			joining++
		case train.GangRunActivity:
			running++
			var hb train.TrainProgress
			d := pa.GetHeartbeatDetails().GetPayloads()
			if len(d) == 0 || converter.GetDefaultDataConverter().FromPayload(d[0], &hb) != nil {
				continue
			}
			for _, r := range hb.Ranks {
				hostText = append(hostText, fmt.Sprintf("rank %d step %d", r.Rank, r.Step))
			}
			if hb.Total > 0 { // rank 0's host: its heartbeat has the total
				p.Step, p.Total = hb.Step, hb.Total
				if pa.GetLastHeartbeatTime() != nil {
					p.BeatAt = pa.GetLastHeartbeatTime().AsTime()
					p.StepsPerSec = f.rate(node, p.Step, p.BeatAt)
				}
			}
		}
	}
	if running == 0 {
		if joining > 0 {
			p.Text = fmt.Sprintf("forming the gang: %d host lease(s) out", joining)
		} else {
			p.Text = "forming the gang: looking for hosts"
		}
		return p
	}
	if p.Total == 0 && len(hostText) > 0 {
		p.Text = fmt.Sprintf("%d hosts: %s", running, strings.Join(hostText, ", "))
	}
	return p
}
