DROP TABLE IF EXISTS webhook_endpoints_disabled;
DROP TABLE IF EXISTS webhook_deliveries;
