package main

import (
	"encoding/json"
	"fmt"
	"os"
)

// The end-to-end rules (docs/demo.md), applied to a -report file by -check-report.
const (
	// summaryMinRatio: the automatic compaction's summarisation request reads at least this
	// share of its prompt tokens from the cache.
	summaryMinRatio = 0.95
	// peerMaxRatio: the peer-style request for the same summary reads at most this share.
	peerMaxRatio = 0.10
	// explainPartialTolerance: for a request that shares only a part of the earlier one (after
	// a compaction), llmsession explain's expected cacheable tokens are an estimate (the
	// built-in counter, calibrated on an earlier request's reported prompt), so the server's
	// cached tokens may differ from them by this share of the expected figure.
	explainPartialTolerance = 0.03
	// cacheableMinRatio: every request after the first of its instance reads at least this
	// share of the tokens explain expected the server could reuse (cached / cacheable).
	cacheableMinRatio = 0.99
)

// checkReport applies the end-to-end rules to a report. It returns one line per rule checked
// (what was compared) and one line per violation; the report passes when there are none.
func checkReport(r report) (checked, violations []string) {
	fail := func(format string, a ...any) { violations = append(violations, fmt.Sprintf(format, a...)) }
	ok := func(format string, a ...any) { checked = append(checked, fmt.Sprintf(format, a...)) }
	if r.Error != "" {
		fail("the run failed: %s", r.Error)
	}
	if !r.Verified {
		fail("the session log was not verified")
	}
	prev := map[uint64]row{}
	conversations, summaries, peers := 0, 0, 0
	for i, x := range r.Requests {
		n := i + 1
		switch x.Kind {
		case kindConversation:
			conversations++
			p, seen := prev[x.Instance]
			prev[x.Instance] = x
			name := fmt.Sprintf("request %d (instance %d turn %d step %d)", n, x.Instance, x.Turn, x.Step)
			switch {
			case !seen:
				ok("%s: first of its instance, no cache rule", name)
			case x.AfterCompaction != "":
				// Its history was rewritten: it shares system, tools and the session prefix.
				if x.SharedMessages < x.PrefixLen {
					fail("%s after a compaction shares %d leading messages, less than the %d of the session prefix", name, x.SharedMessages, x.PrefixLen)
				}
				if x.PrefixTokens <= 0 {
					fail("%s after a compaction: the length of system + tools + prefix was not measured (-llama)", name)
				} else if x.CachedTokens < x.PrefixTokens {
					fail("%s after a compaction read %d tokens from cache, less than system + tools + prefix (%d)", name, x.CachedTokens, x.PrefixTokens)
				} else {
					ok("%s after %s compaction: cached %d >= system + tools + prefix %d; shares %d messages >= prefix %d",
						name, withArticle(x.AfterCompaction), x.CachedTokens, x.PrefixTokens, x.SharedMessages, x.PrefixLen)
				}
			default:
				if x.CachedTokens < p.PromptTokens-1 {
					fail("%s read %d tokens from cache, less than the previous prompt %d - 1", name, x.CachedTokens, p.PromptTokens)
				} else {
					ok("%s: cached %d >= previous prompt %d - 1", name, x.CachedTokens, p.PromptTokens)
				}
			}
		case kindSummary:
			summaries++
			ratio := ratioOf(x)
			if ratio < summaryMinRatio {
				fail("summarisation request %d read %d of %d prompt tokens from cache (%.1f%%), less than %.0f%%",
					n, x.CachedTokens, x.PromptTokens, ratio*100, summaryMinRatio*100)
			} else {
				ok("summarisation request %d: cached %d of %d (%.1f%%) >= %.0f%%", n, x.CachedTokens, x.PromptTokens, ratio*100, summaryMinRatio*100)
			}
		case kindPeer:
			peers++
			ratio := ratioOf(x)
			if i == 0 || r.Requests[i-1].Kind != kindSummary {
				fail("peer-style request %d does not follow a summarisation request", n)
			} else if s := r.Requests[i-1]; x.CachedTokens >= s.CachedTokens {
				fail("peer-style request %d read %d tokens from cache, not less than the summarisation request's %d", n, x.CachedTokens, s.CachedTokens)
			}
			if ratio > peerMaxRatio {
				fail("peer-style request %d read %d of %d prompt tokens from cache (%.1f%%), more than %.0f%%",
					n, x.CachedTokens, x.PromptTokens, ratio*100, peerMaxRatio*100)
			} else {
				ok("peer-style request %d: cached %d of %d (%.1f%%) <= %.0f%%", n, x.CachedTokens, x.PromptTokens, ratio*100, peerMaxRatio*100)
			}
		default:
			fail("request %d has an unknown kind %q", n, x.Kind)
		}
	}
	// The usage recorded in the log is the server's (streamed or not), and streamed turns give
	// deltas whose text is the recorded message.
	streamed, usageOK := 0, 0
	for i, x := range r.Requests {
		if x.Kind != kindConversation {
			continue
		}
		name := fmt.Sprintf("request %d (turn %d step %d)", i+1, x.Turn, x.Step)
		switch l := x.Logged; {
		case l == nil:
			fail("%s: no usage was recorded in the log", name)
		case l.Prompt != x.PromptTokens || l.Cached != x.CachedTokens || l.Completion != x.CompletionTokens:
			fail("%s: the log recorded prompt %d, cached %d, completion %d; the server reported %d, %d, %d",
				name, l.Prompt, l.Cached, l.Completion, x.PromptTokens, x.CachedTokens, x.CompletionTokens)
		default:
			usageOK++
		}
		if x.Streamed {
			streamed++
			if x.Deltas == 0 {
				fail("%s was streamed but gave no delta", name)
			} else if !x.DeltaTextMatches {
				fail("%s was streamed, but the text of its deltas differs from the recorded message", name)
			}
		}
	}
	if usageOK == conversations && conversations > 0 {
		ok("the usage recorded in the log equals the server's figures on all %d conversation requests (%d streamed)", conversations, streamed)
	}
	if r.StreamTurns != "" {
		switch {
		case streamed == 0:
			fail("-stream %s was set but no request was streamed", r.StreamTurns)
		case streamed == conversations:
			fail("every conversation request was streamed: there is no non-streamed turn to compare with")
		default:
			ok("%d streamed conversation requests (-stream %s) and %d not streamed, under the same rules", streamed, r.StreamTurns, conversations-streamed)
		}
	}
	checkExplain(r, ok, fail)
	checkIdle(r, ok, fail)
	if conversations < 2 {
		fail("the run has %d conversation requests; the rules need at least 2", conversations)
	}
	if summaries == 0 || r.Landed == 0 {
		fail("no automatic compaction landed (%d summarisation requests, %d landed)", summaries, r.Landed)
	}
	if peers != summaries {
		fail("%d summarisation requests but %d peer-style requests", summaries, peers)
	}
	return checked, violations
}

// checkExplain compares llmsession explain's figures (Session.Explain, attached to the rows)
// with the tokens the server read from its cache:
//   - a request that extends the earlier one whole: explain expects the earlier request's whole
//     prompt. llama-server reads that prompt but its last token (processed again for the logits),
//     plus the part of the earlier reply it generated itself and finds again in the request:
//     expected - 1 <= cached <= expected + the earlier request's completion tokens;
//   - a request that shares only a part (it diverges): |cached - expected| <= 3 % of expected
//     (explainPartialTolerance: the shared part is counted by the built-in estimate);
//   - every request: cached >= 99 % of expected (cacheableMinRatio: cached / cacheable), so a
//     request whose cacheable prefix the server lost fails even where the rules above allow it.
//
// The first request of an instance has no rule (the server may be cold, as in rule 1).
func checkExplain(r report, ok, fail func(format string, a ...any)) {
	byID := map[string]row{}
	instances := map[uint64]bool{}
	explained := 0
	for i, x := range r.Requests {
		if x.Kind == kindPeer {
			continue
		}
		// As in rule 1, the first request of an instance has no rule: explain cannot know that
		// the server lost its cache between instances (a restart).
		first := x.Kind == kindConversation && !instances[x.Instance]
		if x.Kind == kindConversation {
			instances[x.Instance] = true
		}
		if x.Explain == nil {
			fail("request %d has no explain figures", i+1)
			continue
		}
		explained++
		e := x.Explain
		byID[e.ID] = x
		name := fmt.Sprintf("explain, request %d (%s)", i+1, e.ID)
		if e.ComparedWith == "" || first {
			continue
		}
		prev, seen := byID[e.ComparedWith]
		switch {
		case !seen:
			fail("%s: compared with %s, which the report does not have", name, e.ComparedWith)
		case e.Extends:
			lo, hi := e.ExpectedCachedTokens-1, e.ExpectedCachedTokens+prev.CompletionTokens
			if x.CachedTokens < lo || x.CachedTokens > hi {
				fail("%s extends %s: the server read %d tokens from cache, outside expected %d - 1 .. expected + %d reply tokens",
					name, e.ComparedWith, x.CachedTokens, e.ExpectedCachedTokens, prev.CompletionTokens)
			} else {
				ok("%s extends %s: server cached %d in [%d, %d] (expected %d)", name, e.ComparedWith, x.CachedTokens, lo, hi, e.ExpectedCachedTokens)
			}
		default:
			diff := x.CachedTokens - e.ExpectedCachedTokens
			if diff < 0 {
				diff = -diff
			}
			if limit := explainPartialTolerance * float64(e.ExpectedCachedTokens); float64(diff) > limit {
				fail("%s shares part of %s (%s): the server read %d tokens from cache, expected %d (more than %.0f%% off)",
					name, e.ComparedWith, e.Divergence, x.CachedTokens, e.ExpectedCachedTokens, explainPartialTolerance*100)
			} else {
				ok("%s shares part of %s: server cached %d, expected %d (%.1f%% off, within %.0f%%)",
					name, e.ComparedWith, x.CachedTokens, e.ExpectedCachedTokens, float64(diff)*100/float64(e.ExpectedCachedTokens), explainPartialTolerance*100)
			}
		}
	}
	if explained == 0 {
		fail("no request has explain figures")
	}
	instances = map[uint64]bool{}
	for i, x := range r.Requests {
		first := x.Kind == kindConversation && !instances[x.Instance]
		if x.Kind == kindConversation {
			instances[x.Instance] = true
		}
		if x.Explain == nil || first || x.Explain.ComparedWith == "" || x.Explain.ExpectedCachedTokens <= 0 {
			continue
		}
		e := x.Explain
		ratio := float64(x.CachedTokens) / float64(e.ExpectedCachedTokens)
		if ratio < cacheableMinRatio {
			fail("request %d (%s) read %d of %d cacheable tokens from cache (%.1f%%), below %.0f%% (%d of %d prompt tokens)",
				i+1, e.ID, x.CachedTokens, e.ExpectedCachedTokens, ratio*100, cacheableMinRatio*100, x.CachedTokens, x.PromptTokens)
		} else {
			ok("request %d (%s): cached / cacheable %.1f%% >= %.0f%% (cached / prompt %.1f%%)",
				i+1, e.ID, ratio*100, cacheableMinRatio*100, ratioOf(x)*100)
		}
	}
}

func ratioOf(x row) float64 {
	if x.PromptTokens <= 0 {
		return 0
	}
	return float64(x.CachedTokens) / float64(x.PromptTokens)
}

// runCheck is -check-report: prints what was checked and exits 0 (passed) or 1.
func runCheck(path string) int {
	b, err := os.ReadFile(path)
	if err != nil {
		fmt.Fprintln(os.Stderr, "check-report:", err)
		return 2
	}
	var r report
	if err := json.Unmarshal(b, &r); err != nil {
		fmt.Fprintf(os.Stderr, "check-report: %s: %v\n", path, err)
		return 2
	}
	checked, violations := checkReport(r)
	for _, c := range checked {
		fmt.Println("ok   ", c)
	}
	for _, v := range violations {
		fmt.Println("FAIL ", v)
	}
	if len(violations) > 0 {
		fmt.Printf("check-report: %d rule(s) violated in %s\n", len(violations), path)
		return 1
	}
	fmt.Printf("check-report: all %d checks passed (%s)\n", len(checked), path)
	return 0
}
