// Command weather prints a five-day forecast for a city as a text table.
package main

import (
	"context"
	"flag"
	"fmt"
	"net/http"
	"os"
	"time"

	"example.com/weather-cli/forecast"
	"example.com/weather-cli/render"
)

func main() {
	city := flag.String("city", "", "city name, e.g. Oslo")
	days := flag.Int("days", 5, "number of days, 1..5")
	system := flag.String("units", os.Getenv("WEATHER_UNITS"), "metric or imperial (default metric)")
	flag.Parse()
	if err := run(*city, *days, *system); err != nil {
		fmt.Fprintln(os.Stderr, "weather:", err)
		os.Exit(1)
	}
}

func run(city string, days int, system string) error {
	if city == "" {
		return fmt.Errorf("-city is required")
	}
	base := os.Getenv("WEATHER_API_URL")
	if base == "" {
		return fmt.Errorf("WEATHER_API_URL is not set")
	}
	timeout := 10 * time.Second
	if v := os.Getenv("WEATHER_TIMEOUT"); v != "" {
		d, err := time.ParseDuration(v)
		if err != nil {
			return fmt.Errorf("WEATHER_TIMEOUT: %w", err)
		}
		timeout = d
	}
	// Issue #15 is in forecast.Client; main always passes a client with a timeout.
	c := &forecast.Client{BaseURL: base, HTTP: &http.Client{Timeout: timeout}}
	ctx, cancel := context.WithTimeout(context.Background(), 2*timeout)
	defer cancel()
	list, err := c.Fetch(ctx, city, days)
	if err != nil {
		return err
	}
	return render.Table(os.Stdout, list, system)
}
