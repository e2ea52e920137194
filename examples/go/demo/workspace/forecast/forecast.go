// Package forecast fetches daily forecasts from the forecast API.
package forecast

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"strconv"
	"time"
)

// Day is the forecast for one day, temperatures in degrees Celsius.
type Day struct {
	Date    time.Time `json:"date"`
	MinC    float64   `json:"min_c"`
	MaxC    float64   `json:"max_c"`
	Summary string    `json:"summary"`
}

// Client talks to the forecast API at BaseURL.
type Client struct {
	BaseURL string
	// HTTP is the client used for requests. Issue #15: when nil, http.DefaultClient is used,
	// which has no timeout.
	HTTP *http.Client
}

// Fetch returns up to days daily forecasts for city.
func (c *Client) Fetch(ctx context.Context, city string, days int) ([]Day, error) {
	if days < 1 || days > 5 {
		return nil, fmt.Errorf("fetch forecast for %q: days must be 1..5, got %d", city, days)
	}
	q := url.Values{"city": {city}, "days": {strconv.Itoa(days)}}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, c.BaseURL+"/v1/forecast?"+q.Encode(), nil)
	if err != nil {
		return nil, fmt.Errorf("fetch forecast for %q: %w", city, err)
	}
	hc := c.HTTP
	if hc == nil {
		hc = http.DefaultClient
	}
	resp, err := hc.Do(req)
	if err != nil {
		return nil, fmt.Errorf("fetch forecast for %q: %w", city, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("fetch forecast for %q: HTTP %d", city, resp.StatusCode)
	}
	var body struct {
		Days []Day `json:"days"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&body); err != nil {
		return nil, fmt.Errorf("fetch forecast for %q: decode: %w", city, err)
	}
	return body.Days, nil
}
