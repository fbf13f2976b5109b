'use strict';
// plotly.js with the traces the app's figures draw (figures/*.py: go.Scatter, go.Bar, go.Heatmap), nothing else:
// the cartesian bundle also registers box, violin, histograms, contour, pie, image, ternary and world calendars,
// whose start-up cost a new visitor paid before the first figure (tests/app/test_plotly_figure.py keeps this in step).
var Plotly = require('plotly.js/lib/core'); // holds scatter

Plotly.register([require('plotly.js/lib/bar'), require('plotly.js/lib/heatmap')]);

module.exports = Plotly;
