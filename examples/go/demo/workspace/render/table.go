// Package render prints forecasts as text tables.
package render

import (
	"fmt"
	"io"
	"strings"

	"example.com/weather-cli/forecast"
	"example.com/weather-cli/units"
)

// Table writes one row per day: date, minimum, maximum and summary, temperatures in the
// requested unit system ("metric" or "imperial"), rounded to one decimal.
//
// Issue #17: with zero days it prints the header and nothing else.
func Table(w io.Writer, days []forecast.Day, system string) error {
	sym := units.Symbol(system)
	header := fmt.Sprintf("%-10s  %8s  %8s  %s", "date", "min "+sym, "max "+sym, "summary")
	if _, err := fmt.Fprintln(w, header); err != nil {
		return err
	}
	if _, err := fmt.Fprintln(w, strings.Repeat("-", len(header))); err != nil {
		return err
	}
	for _, d := range days {
		lo, ok := units.Convert(d.MinC, system)
		if !ok {
			return fmt.Errorf("render: unknown unit system %q", system)
		}
		hi, _ := units.Convert(d.MaxC, system)
		_, err := fmt.Fprintf(w, "%-10s  %8.1f  %8.1f  %s\n",
			d.Date.Format("2006-01-02"), units.Round(lo, 1), units.Round(hi, 1), d.Summary)
		if err != nil {
			return err
		}
	}
	return nil
}
