package llmworker

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/medgym/medgym/services/llm-worker/policy"
)

// endpointCollector exports the model endpoints' health (the clients'
// breakers) on each scrape.
type endpointCollector struct {
	pool          *policy.OpenAIPool
	down, waiting *prometheus.Desc
}

func newEndpointCollector(pool *policy.OpenAIPool) *endpointCollector {
	labels := []string{"endpoint", "model"}
	return &endpointCollector{pool: pool,
		down: prometheus.NewDesc("medgym_llm_endpoint_down",
			"1 while the model endpoint is down (three or more failed answers in a row: refused, 429, 5xx; none succeeding); episodes wait for it instead of failing.", labels, nil),
		waiting: prometheus.NewDesc("medgym_llm_calls_waiting",
			"Model calls waiting, after a failure no answer has followed, for the endpoint to answer again (each holds an episode step; the dispatcher admits no more episodes than its in-flight bound).", labels, nil),
	}
}

func (c *endpointCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- c.down
	ch <- c.waiting
}

func (c *endpointCollector) Collect(ch chan<- prometheus.Metric) {
	// One series per endpoint and model (the pool may hold several clients
	// for one: with and without token ids, other key variables).
	type key struct{ url, model string }
	down, waiting := map[key]float64{}, map[key]float64{}
	for _, h := range c.pool.Health() {
		k := key{h.BaseURL, h.Model}
		if h.Down {
			down[k] = 1
		} else if _, ok := down[k]; !ok {
			down[k] = 0
		}
		waiting[k] += float64(h.Waiting)
	}
	for k, v := range down {
		ch <- prometheus.MustNewConstMetric(c.down, prometheus.GaugeValue, v, k.url, k.model)
		ch <- prometheus.MustNewConstMetric(c.waiting, prometheus.GaugeValue, waiting[k], k.url, k.model)
	}
}
