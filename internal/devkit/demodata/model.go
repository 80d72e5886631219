// Package demodata generates retrain's synthetic ads click-through data:
// a training table of impressions with click labels and two daily feature
// groups, written to the lake. The labels are drawn from a known logistic
// model of the features as of the previous day (see Model), so a trainer
// can be scored against the Bayes-optimal AUC, and a join that leaks
// same-day information (for example user click_rate_day joined same_day,
// which is computed from the very labels it would predict) stands out.
//
// Generation is deterministic for a seed: every random draw is a hash of
// the seed and of what it is for (user, ad, day, row), never of the order
// in which things are generated.
package demodata

import "math"

// UserFeatures are a user's features for one day, as written to
// features.user_daily.
type UserFeatures struct {
	Activity     float64 // how active the user is that day (log-normal around the user's level)
	CTR7d        float64 // exponentially smoothed click rate up to and including the day
	Sessions     float64 // sessions that day
	RecencyDays  float64 // days since the user's last click, capped at 30
	ClickRateDay float64 // clicks / impressions of that day; NaN when none (written as null)
	RecentAds    []int64 // the last (up to 5) ads clicked, newest last
}

// AdFeatures are an ad's features for one day, as written to
// features.ad_daily.
type AdFeatures struct {
	Quality float64 // the ad's quality that day
	CTR7d   float64 // exponentially smoothed click rate of the ad
	AgeDays float64 // days since the ad was created
}

// Model is the logistic model the labels are drawn from: an impression on
// day d is clicked with probability Prob(user features of day d-1, ad
// features of day d-1). The weights are part of the data set's contract:
// a trainer test computes the Bayes AUC of a generated table by joining
// previous-day features and scoring them with DefaultModel.Prob.
type Model struct {
	Bias     float64
	UserCTR  float64 // on logit(CTR7d)
	Activity float64 // on log(Activity)
	Recency  float64 // on RecencyDays/30
	Quality  float64 // on ad Quality
	AdCTR    float64 // on logit(ad CTR7d)
}

// DefaultModel is the model retrain's demo data uses.
var DefaultModel = Model{
	Bias:     -0.3,
	UserCTR:  0.6,
	Activity: 0.5,
	Recency:  -1.0,
	Quality:  1.2,
	AdCTR:    0.2,
}

// Logit is the model's log-odds of a click.
func (m Model) Logit(u UserFeatures, a AdFeatures) float64 {
	return m.Bias +
		m.UserCTR*logit(u.CTR7d) +
		m.Activity*math.Log(u.Activity) +
		m.Recency*u.RecencyDays/30 +
		m.Quality*a.Quality +
		m.AdCTR*logit(a.CTR7d)
}

// Prob is the probability of a click.
func (m Model) Prob(u UserFeatures, a AdFeatures) float64 {
	return sigmoid(m.Logit(u, a))
}

func sigmoid(x float64) float64 { return 1 / (1 + math.Exp(-x)) }

func logit(p float64) float64 {
	p = min(max(p, 1e-4), 1-1e-4)
	return math.Log(p / (1 - p))
}
