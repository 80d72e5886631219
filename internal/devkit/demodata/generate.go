package demodata

import (
	"fmt"
	"math"
	"sort"
	"time"

	"github.com/apache/iceberg-go"

	"github.com/retrain-ml/retrain/internal/backfill"
	"github.com/retrain-ml/retrain/internal/splitmix"
)

// Config says how much data to generate.
type Config struct {
	Rows  int64        // training rows in all (default 100,000)
	Days  int          // training days (default 14); features cover one day more, the day before
	Seed  uint64       // default 1
	Start backfill.Day // first training day (default 2026-11-01, so output never depends on today)
	Users int          // default max(1000, Rows/200)
	Ads   int          // default max(100, Rows/2000)
	// Buckets is the bucket count of the training table's user_id
	// partition (default 16).
	Buckets int
	// Broken, if set, deliberately breaks one feature column in the
	// feature tables (not in the labels): for exercising data checks.
	Broken Broken
	// Unsorted shuffles the rows within each training partition and drops
	// the table's sort order: the same rows as a sorted table, for
	// comparing file sizes.
	Unsorted bool
}

// Broken names a feature column to break and how.
type Broken struct {
	Feature string // a column of features.user_daily or features.ad_daily
	Mode    string // nulls (default), constant or garbage
}

// DefaultStart is the first training day unless configured.
const DefaultStart = backfill.Day(20758) // 2026-11-01

func (c Config) withDefaults() (Config, error) {
	if c.Rows <= 0 {
		c.Rows = 100_000
	}
	if c.Days <= 0 {
		c.Days = 14
	}
	if c.Seed == 0 {
		c.Seed = 1
	}
	if c.Start == 0 {
		c.Start = DefaultStart
	}
	if c.Users <= 0 {
		c.Users = int(max(1000, c.Rows/200))
	}
	if c.Ads <= 0 {
		c.Ads = int(max(100, c.Rows/2000))
	}
	if c.Buckets <= 0 {
		c.Buckets = 16
	}
	if c.Broken.Feature != "" {
		if c.Broken.Mode == "" {
			c.Broken.Mode = "nulls"
		}
		switch c.Broken.Mode {
		case "nulls", "constant", "garbage":
		default:
			return c, fmt.Errorf("broken feature mode %q: want nulls, constant or garbage", c.Broken.Mode)
		}
		if !isFeature(c.Broken.Feature) {
			return c, fmt.Errorf("broken feature %q: not a column of features.user_daily or features.ad_daily (%v, %v)", c.Broken.Feature, userFeatureNames, adFeatureNames)
		}
		if c.Broken.Feature == "recent_ads" && c.Broken.Mode != "nulls" {
			return c, fmt.Errorf("broken feature recent_ads: only mode nulls applies to a list feature")
		}
	}
	return c, nil
}

// Impressions are one day of training rows, columnar, in the order they
// are written.
type Impressions struct {
	RequestID []int64
	UserID    []int64
	AdID      []int64
	EventTS   []int64 // microseconds since the epoch
	Label     []int32
	Bucket    []int32 // bucket of UserID under the table's bucket transform
	Prob      []float64
}

// Len is the number of rows.
func (im *Impressions) Len() int { return len(im.RequestID) }

// DayData is everything generated for one day.
type DayData struct {
	Day         backfill.Day
	Impressions *Impressions // nil for the day before the first training day
	Users       []UserFeatures
	Ads         []AdFeatures
}

// Generator produces the data day by day. It keeps per-user and per-ad
// state (the smoothed click rates need the past), a few dozen bytes per
// entity, and one day of impressions: memory does not grow with Days.
type Generator struct {
	cfg    Config
	model  Model
	day    backfill.Day // next day to generate
	bucket []int32      // per user
	level  []float64    // per user activity level
	users  []UserFeatures
	ads    []AdFeatures
	adBase []float64 // per ad base quality
	adBorn []backfill.Day
}

// NewGenerator starts a generator; the first Next is the day before the
// first training day (features only).
func NewGenerator(cfg Config) (*Generator, error) {
	cfg, err := cfg.withDefaults()
	if err != nil {
		return nil, err
	}
	g := &Generator{cfg: cfg, model: DefaultModel, day: cfg.Start - 1}
	bucketOf := iceberg.BucketTransform{NumBuckets: cfg.Buckets}.Transformer(iceberg.PrimitiveTypes.Int64)
	g.bucket = make([]int32, cfg.Users)
	g.level = make([]float64, cfg.Users)
	g.users = make([]UserFeatures, cfg.Users)
	for u := range cfg.Users {
		g.bucket[u] = bucketOf(int64(u)).Val
		g.level[u] = 0.5 * g.normal(streamUserLevel, uint64(u), 0)
		g.users[u] = UserFeatures{
			CTR7d:        sigmoid(-2 + 0.8*g.normal(streamUserCTR, uint64(u), 0)),
			RecencyDays:  float64(g.hash(streamUserRecency, uint64(u), 0) % 10),
			ClickRateDay: math.NaN(),
		}
		g.users[u].Activity, g.users[u].Sessions = g.activity(u, g.day)
	}
	g.ads = make([]AdFeatures, cfg.Ads)
	g.adBase = make([]float64, cfg.Ads)
	g.adBorn = make([]backfill.Day, cfg.Ads)
	for a := range cfg.Ads {
		g.adBase[a] = 0.6 * g.normal(streamAdQuality, uint64(a), 0)
		g.adBorn[a] = cfg.Start - backfill.Day(1+g.hash(streamAdBorn, uint64(a), 0)%60)
		g.ads[a] = AdFeatures{CTR7d: sigmoid(-2 + 0.5*g.normal(streamAdCTR, uint64(a), 0))}
		g.ads[a].Quality, g.ads[a].AgeDays = g.adDay(a, g.day)
	}
	return g, nil
}

// Config returns the configuration with defaults applied.
func (g *Generator) Config() Config { return g.cfg }

// Done reports whether every day has been generated.
func (g *Generator) Done() bool { return g.day > g.cfg.Start+backfill.Day(g.cfg.Days)-1 }

// Next generates the next day: its impressions (labels drawn from the
// features of the day before, which the generator holds), then that day's
// features, which include aggregates of those very labels.
func (g *Generator) Next() *DayData {
	d := g.day
	g.day++
	if d < g.cfg.Start {
		return &DayData{Day: d, Users: cloneUsers(g.users), Ads: slicesClone(g.ads)}
	}
	im := g.impressions(d)

	// Aggregate the day's clicks, in event order within each user.
	imps := make([]int32, g.cfg.Users)
	clicks := make([]int32, g.cfg.Users)
	adImps := make([]int32, g.cfg.Ads)
	adClicks := make([]int32, g.cfg.Ads)
	clicked := map[int][]int64{}
	for i := range im.Len() {
		u, a := int(im.UserID[i]), int(im.AdID[i])
		imps[u]++
		adImps[a]++
		if im.Label[i] == 1 {
			clicks[u]++
			adClicks[a]++
			clicked[u] = append(clicked[u], im.AdID[i])
		}
	}
	for u := range g.users {
		f := &g.users[u]
		if imps[u] > 0 {
			f.ClickRateDay = float64(clicks[u]) / float64(imps[u])
		} else {
			f.ClickRateDay = math.NaN()
		}
		f.CTR7d = (8*f.CTR7d + float64(clicks[u])) / (8 + float64(imps[u]))
		if clicks[u] > 0 {
			f.RecencyDays = 0
		} else {
			f.RecencyDays = min(f.RecencyDays+1, 30)
		}
		if ads := clicked[u]; len(ads) > 0 {
			recent := append(append([]int64(nil), f.RecentAds...), ads...)
			if len(recent) > 5 {
				recent = recent[len(recent)-5:]
			}
			f.RecentAds = recent
		}
		f.Activity, f.Sessions = g.activity(u, d)
	}
	for a := range g.ads {
		f := &g.ads[a]
		f.CTR7d = (20*f.CTR7d + float64(adClicks[a])) / (20 + float64(adImps[a]))
		f.Quality, f.AgeDays = g.adDay(a, d)
	}
	return &DayData{Day: d, Impressions: im, Users: cloneUsers(g.users), Ads: slicesClone(g.ads)}
}

// rowsOn is the number of training rows of day d.
func (g *Generator) rowsOn(d backfill.Day) int {
	i := int64(d - g.cfg.Start)
	n := g.cfg.Rows / int64(g.cfg.Days)
	if i < g.cfg.Rows%int64(g.cfg.Days) {
		n++
	}
	return int(n)
}

type impression struct {
	id       int64
	user, ad int64
	ts       int64
	label    int32
	bucket   int32
	prob     float64
	order    uint64
}

func (g *Generator) impressions(d backfill.Day) *Impressions {
	n := g.rowsOn(d)
	rows := make([]impression, n)
	day := uint64(d)
	for i := range n {
		key := day<<32 | uint64(i)
		// Skewed: a few heavy users and popular ads, a long tail.
		u := int64(float64(g.cfg.Users) * math.Pow(g.uniform(streamPickUser, key, 0), 2))
		a := int64(float64(g.cfg.Ads) * math.Pow(g.uniform(streamPickAd, key, 0), 2))
		p := g.model.Prob(g.users[u], g.ads[a])
		var label int32
		if g.uniform(streamLabel, key, 0) < p {
			label = 1
		}
		rows[i] = impression{
			user: u, ad: a, label: label, prob: p, bucket: g.bucket[u],
			ts:    d.Micros() + int64(g.uniform(streamEventTime, key, 0)*float64(backfill.MicrosPerDay)),
			order: g.hash(streamShuffle, key, 0),
		}
	}
	// The training table's layout: by bucket (its partition), then by user
	// and time within the file. Request ids follow that order.
	sort.Slice(rows, func(i, j int) bool {
		a, b := rows[i], rows[j]
		if a.bucket != b.bucket {
			return a.bucket < b.bucket
		}
		if a.user != b.user {
			return a.user < b.user
		}
		if a.ts != b.ts {
			return a.ts < b.ts
		}
		return a.order < b.order
	})
	for i := range rows {
		rows[i].id = int64(d-g.cfg.Start+1)<<32 | int64(i)
	}
	if g.cfg.Unsorted {
		// The same rows, in random order within each bucket.
		sort.SliceStable(rows, func(i, j int) bool {
			if rows[i].bucket != rows[j].bucket {
				return rows[i].bucket < rows[j].bucket
			}
			return rows[i].order < rows[j].order
		})
	}
	im := &Impressions{
		RequestID: make([]int64, n), UserID: make([]int64, n), AdID: make([]int64, n),
		EventTS: make([]int64, n), Label: make([]int32, n), Bucket: make([]int32, n), Prob: make([]float64, n),
	}
	for i, r := range rows {
		im.RequestID[i], im.UserID[i], im.AdID[i], im.EventTS[i] = r.id, r.user, r.ad, r.ts
		im.Label[i], im.Bucket[i], im.Prob[i] = r.label, r.bucket, r.prob
	}
	return im
}

func (g *Generator) activity(u int, d backfill.Day) (activity, sessions float64) {
	activity = math.Exp(g.level[u] + 0.3*g.normal(streamUserActivity, uint64(u), uint64(d)))
	sessions = math.Max(0, math.Round(3*activity+g.normal(streamUserSessions, uint64(u), uint64(d))))
	return activity, sessions
}

func (g *Generator) adDay(a int, d backfill.Day) (quality, age float64) {
	return g.adBase[a] + 0.1*g.normal(streamAdDaily, uint64(a), uint64(d)), float64(d - g.adBorn[a])
}

func cloneUsers(us []UserFeatures) []UserFeatures {
	out := slicesClone(us)
	// RecentAds slices are replaced, never appended to in place, so
	// sharing them between days is safe.
	return out
}

func slicesClone[T any](s []T) []T { return append([]T(nil), s...) }

// Random streams: every draw hashes the seed, its stream and its subject.
const (
	streamUserLevel = iota + 1
	streamUserCTR
	streamUserRecency
	streamUserActivity
	streamUserSessions
	streamAdQuality
	streamAdBorn
	streamAdCTR
	streamAdDaily
	streamPickUser
	streamPickAd
	streamLabel
	streamEventTime
	streamShuffle
	streamBroken
	// New streams go last: inserting one would change every later draw.
	streamNoise
	streamPublish
)

func (g *Generator) hash(stream, a, b uint64) uint64 {
	return splitmix.Mix64(splitmix.Mix64(splitmix.Mix64(g.cfg.Seed^0x9e3779b97f4a7c15)^stream*0xbf58476d1ce4e5b9^a) ^ b*0x94d049bb133111eb)
}

// PublishWindow is how late into the next day a day's feature rows are
// published: each row's ts is spread over the first PublishWindow of the
// day after its date. A day's aggregates exist only once it is over, and a
// real daily job lands them over the next morning, not at midnight; so an
// impression early in day d sees, as of its time, the row of day d-2 for
// an entity whose d-1 row is not out yet, and the as_of and previous_day
// alignments give different rows, as they do on real data.
const PublishWindow = 12 * time.Hour

// publishedAt is when the row of entity (stream: whose) for day d was
// published: a fixed draw in the first PublishWindow of day d+1.
func (g *Generator) publishedAt(stream, entity uint64, d backfill.Day) int64 {
	return (d + 1).Micros() + int64(g.uniform(streamPublish, stream<<40^entity, uint64(d))*float64(PublishWindow.Microseconds()))
}

// publishStamps are the ts of n rows of entities 0..n-1 for day d.
func (g *Generator) publishStamps(stream uint64, d backfill.Day, n int) []int64 {
	ts := make([]int64, n)
	for i := range ts {
		ts[i] = g.publishedAt(stream, uint64(i), d)
	}
	return ts
}

// uniform is in [0, 1).
func (g *Generator) uniform(stream, a, b uint64) float64 {
	return float64(g.hash(stream, a, b)>>11) / (1 << 53)
}

// normal is a standard normal draw (Box-Muller on two hashed uniforms).
func (g *Generator) normal(stream, a, b uint64) float64 {
	u1 := g.uniform(stream, a, b)
	u2 := g.uniform(stream, a, b^0x5555555555555555)
	return math.Sqrt(-2*math.Log(1-u1)) * math.Cos(2*math.Pi*u2)
}
