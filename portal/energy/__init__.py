"""Live energy saving (issue #19): sample node demand, forecast it, power idle nodes down and wake them again
through the site's power commands. The pure policy and forecaster live in ``scheduling.energy``; see docs/energy.md."""
