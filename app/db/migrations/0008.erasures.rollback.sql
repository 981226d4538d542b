DROP TABLE erasure_files;
DROP TABLE erasures;
